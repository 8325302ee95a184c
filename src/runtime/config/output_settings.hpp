#pragma once

#include "core/names.hpp"
#include "plan/program.hpp"

#include <string>

namespace madpipe::runtime {

// What a NaN or Inf loss or gradient does (--on-nan).
enum class OnNonFinite { Stop, Skip };
inline constexpr Named<OnNonFinite> kOnNonFiniteNames[] = {{OnNonFinite::Stop, "stop"},
                                                           {OnNonFinite::Skip, "skip"}};

// [output]: files, checkpoints, traces and how the run reacts to trouble.
struct OutputSettings {
  std::string output_dir = "runs/default";
  int checkpoint_every = 0;       // steps between checkpoints (0: only at the end)
  int keep_checkpoints = 3;       // complete checkpoints kept, the newest (0: all)
  int trace_steps = 5;            // steps recorded in <output_dir>/trace.json (0: no trace)
  bool resume = false;            // continue from the newest whole checkpoint in <output_dir>
  double transfer_timeout = 600;  // seconds a rank waits for a transfer (0: for ever)
  // Where received activations and gradients land (--receive-buffers).
  plan::ReceivePosting receive_buffers = plan::ReceivePosting::Arena;
  int receive_lookahead = 2;  // arena: compute instructions between a receive's post and its use
  OnNonFinite on_nan = OnNonFinite::Stop;
  bool quiet = false;
  // Profile and plan, write profile.json and plan.json, train nothing; needs one process only,
  // and profiles on the CPU when the device is not on this machine.
  bool dry_run = false;
};

}  // namespace madpipe::runtime
