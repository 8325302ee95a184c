#pragma once

#include "solver/solve.hpp"

#include <memory>

namespace madpipe::solver {

// Runs another backend's solve() in a child process (fork) and reads its result back through a
// pipe, so that a solver that aborts or crashes (CLP has assertions that call abort()) or hangs
// past twice its time limit costs an error result, not the planner's process. The child writes
// nothing but its result and the solver's own log.
std::unique_ptr<Backend> isolate_backend(std::unique_ptr<Backend> inner);

}  // namespace madpipe::solver
