#pragma once

#include "plan/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::plan {

enum class StartPolicy {
  Timetable,  // an op starts at max(ready, its planned time): what the pattern promises
  Asap,       // an op starts as soon as its inputs and its resource are free, in pattern order
};

struct SimOptions {
  int micro_batches = 0;  // 0: 4 * max(stages, largest NCA), rounded up to a multiple of k
  StartPolicy policy = StartPolicy::Timetable;
};

struct SimOp {
  schedule::OpKind kind = schedule::OpKind::F;
  int stage = 0;
  int micro_batch = 0;
  int resource = 0;  // see resource_of()
  double start_ms = 0;
  double end_ms = 0;
};

struct MemoryPoint {
  double time_ms = 0;
  std::int64_t bytes = 0;  // full memory of the GPU from this time on
};

struct SimResult {
  int micro_batches = 0;
  double step_ms = 0;           // first start to last end, warm-up and drain included
  double steady_period_ms = 0;  // pattern period measured in the steady state (per k micro-batches)
  double steady_normalized_ms = 0;               // steady_period_ms / k
  std::vector<SimOp> ops;                        // in start order
  std::vector<std::vector<MemoryPoint>> memory;  // per GPU timeline
  std::vector<std::int64_t> peak_memory_bytes;   // per GPU
};

// Runs the pattern for micro-batches 0..N-1 of one training step with a flush: each resource
// executes its ops in the order of their planned times. Throws Error{InvalidInput} if the pattern
// deadlocks (it is then not valid).
SimResult simulate(const Plan& plan, const SimOptions& options = {});

}  // namespace madpipe::plan
