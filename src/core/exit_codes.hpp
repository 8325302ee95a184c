#pragma once

#include "core/error.hpp"

#include <exception>
#include <string>
#include <utility>

namespace madpipe {

// No plan of the request fits the GPUs' memory: bad input whose message says what would fit,
// told apart by its exit status.
class NoPlanFits : public Error {
 public:
  NoPlanFits(std::string field, std::string problem)
      : Error(ErrorKind::InvalidInput, "", std::move(field), std::move(problem)) {}
};

// The exit status of every madpipe command, the same on every rank of a training run
// (docs/cli.md#exit-status). Scripts and schedulers tell the cases apart by it: a job stopped
// by a signal after its checkpoint is requeued, one whose plan does not fit is not.
enum ExitCode : int {
  kExitFinished = 0,
  kExitRuntimeFailure = 1,     // a rank failed while running: a lost peer, a NaN loss, a full disk
  kExitBadInput = 2,           // an option, config, profile, plan, model or data file is wrong
  kExitNoPlanFits = 3,         // the planner found no plan in memory (the message says what would)
  kExitStoppedResumable = 75,  // SIGTERM, SIGINT or SIGUSR1: checkpoint written, --resume goes on
};

// The exit status for an exception that ends a command.
int exit_code_of(const std::exception& e) noexcept;

}  // namespace madpipe
