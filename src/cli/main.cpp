// The `madpipe` command. This is the only `try` of the CLI: every error surfaces here.

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "core/error.hpp"
#include "core/exit_codes.hpp"

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>

int main(int argc, char** argv) {
  try {
    return madpipe::cli::run_madpipe(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const madpipe::Error& thrown) {
    const madpipe::Error e = madpipe::cli::with_config_origin(thrown);
    const bool internal = e.kind() == madpipe::ErrorKind::Internal;
    std::cerr << "madpipe: " << (internal ? "internal error: " : "error: ") << e.what() << '\n';
    return madpipe::exit_code_of(thrown);
  } catch (const boost::program_options::error& e) {
    std::cerr << "madpipe: error: "
              << madpipe::cli::option_error_text(e, std::vector<std::string>(argv + 1, argv + argc))
              << '\n';
    return madpipe::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "madpipe: internal error: " << e.what() << '\n';
    return madpipe::kExitRuntimeFailure;
  }
}
