#pragma once

namespace madpipe::runtime {

// SIGTERM and SIGINT ask a training run to stop after its current step (with a checkpoint)
// instead of killing the process. A second signal of either kind kills it as usual.
void install_stop_handlers();
// The signal that asked to stop, or 0.
int stop_signal() noexcept;
const char* signal_name(int signal) noexcept;  // "SIGTERM", "SIGINT", ...

}  // namespace madpipe::runtime
