#pragma once

namespace madpipe::runtime {

// SIGTERM, SIGINT and SIGUSR1 (what Slurm sends ahead of the end of a job) ask a training run to
// stop after its current step, with a checkpoint, and exit with kExitStoppedResumable
// (core/exit_codes.hpp) instead of being killed. A second signal kills it as usual.
void install_stop_handlers();
// The signal that asked to stop, or 0.
int stop_signal() noexcept;
const char* signal_name(int signal) noexcept;  // "SIGTERM", "SIGINT", ...

}  // namespace madpipe::runtime
