#pragma once

#include <string>
#include <vector>

namespace madpipe::cli {

inline constexpr const char* kVersion = "0.1.0";

// One subcommand: `run` parses its arguments (everything after the subcommand's name) and runs
// it; "--help" prints its help. Returns the exit status.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

// The subcommands, in the order `madpipe --help` lists them.
const std::vector<Command>& commands();

// Runs `madpipe ARGS...` (ARGS without the program name): --help, --version, `help COMMAND`,
// or a subcommand. Throws madpipe::Error or boost::program_options::error; main catches them.
int run_madpipe(const std::vector<std::string>& args);

}  // namespace madpipe::cli
