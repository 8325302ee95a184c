#pragma once

#include <stdexcept>
#include <string>

namespace madpipe {

enum class ErrorKind { InvalidInput, Io, Unsupported, Solver, Runtime, Internal };

// The one exception type that crosses a public API. what() reads
// "<file>: <field>: <problem>", empty parts omitted.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string file, std::string field, std::string problem);

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& file() const noexcept { return file_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& problem() const noexcept { return problem_; }

 private:
  ErrorKind kind_;
  std::string file_;
  std::string field_;
  std::string problem_;
};

// Shorthand for the most common case: bad user input.
[[noreturn]] void throw_invalid(const std::string& file, const std::string& field,
                                const std::string& problem);

}  // namespace madpipe

#define MADPIPE_UNREACHABLE(msg)                                 \
  throw ::madpipe::Error(::madpipe::ErrorKind::Internal, "", "", \
                         std::string("unreachable: ") + (msg))
