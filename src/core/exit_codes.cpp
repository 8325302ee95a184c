#include "core/exit_codes.hpp"

int madpipe::exit_code_of(const std::exception& e) noexcept {
  if (dynamic_cast<const NoPlanFits*>(&e) != nullptr) return kExitNoPlanFits;
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error == nullptr) return kExitRuntimeFailure;
  switch (error->kind()) {
    case ErrorKind::InvalidInput:
    case ErrorKind::Io:
    case ErrorKind::Unsupported:
      return kExitBadInput;
    case ErrorKind::Solver:
    case ErrorKind::Runtime:
    case ErrorKind::Internal:
      return kExitRuntimeFailure;
  }
  return kExitRuntimeFailure;
}
