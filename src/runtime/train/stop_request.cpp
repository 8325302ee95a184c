#include "runtime/train/stop_request.hpp"

#include <csignal>

#include <signal.h>

namespace {
volatile std::sig_atomic_t requested = 0;

extern "C" void request_stop(int signal) {
  if (requested != 0) {  // asked twice: the default action
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  requested = signal;
}
}  // namespace

void madpipe::runtime::install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);  // Slurm's warning before it ends a job (--signal)
}

int madpipe::runtime::stop_signal() noexcept { return requested; }

const char* madpipe::runtime::signal_name(int signal) noexcept {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}
