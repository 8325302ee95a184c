#include "core/error.hpp"

#include <utility>

static std::string compose_message(const std::string& file, const std::string& field,
                                   const std::string& problem) {
  std::string out;
  for (const std::string* part : {&file, &field, &problem}) {
    if (part->empty()) continue;
    if (!out.empty()) out += ": ";
    out += *part;
  }
  return out;
}

madpipe::Error::Error(ErrorKind kind, std::string file, std::string field, std::string problem)
    : std::runtime_error(compose_message(file, field, problem)),
      kind_(kind),
      file_(std::move(file)),
      field_(std::move(field)),
      problem_(std::move(problem)) {}

void madpipe::throw_invalid(const std::string& file, const std::string& field,
                            const std::string& problem) {
  throw Error(ErrorKind::InvalidInput, file, field, problem);
}
