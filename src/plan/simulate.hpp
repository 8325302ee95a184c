#pragma once

#include "plan/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::plan {

enum class StartPolicy {
  Timetable,  // an op starts at max(ready, its planned time): what the pattern promises
  // What a runtime runs: transfers, F and B in pattern order, each as soon as its input and its
  // resource are free; the W of a split stage where its GPU would otherwise wait (in the
  // warm-up and drain above all), or before an F or B that would take the GPU's memory above
  // its budget, or at the end. A plan with a step order for the simulated number of
  // micro-batches (Plan::step_order) runs each GPU's F, B and W in that order instead, and each
  // link's transfers in the order their inputs are done.
  Asap,
};

struct SimOptions {
  int micro_batches = 0;  // 0: 4 * max(stages, largest NCA), rounded up to a multiple of k
  StartPolicy policy = StartPolicy::Timetable;
  // Asap: per GPU, the memory that waiting W ops may fill; never below the pattern's peak
  // (evaluate_memory). Empty: the plan's predicted memory, at most step_memory_cap_bytes().
  std::vector<std::int64_t> memory_budget_bytes;
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
  std::vector<std::vector<SimOp>> per_gpu;       // each GPU's F, B and W in the order it runs them
  std::vector<std::vector<MemoryPoint>> memory;  // per GPU timeline
  std::vector<std::int64_t> peak_memory_bytes;   // per GPU
};

// Runs the pattern for micro-batches 0..N-1 of one training step with a flush, under the policy.
// Throws Error{InvalidInput} if the pattern deadlocks (it is then not valid).
SimResult simulate(const Plan& plan, const SimOptions& options = {});

// The most that a synchronous step's waiting W ops may take a GPU's memory to (the zero-bubble
// paper's ZB-H1 rule, in bytes): the busiest GPU's pattern peak (evaluate_memory), within the
// platform's memory.
std::int64_t step_memory_cap_bytes(const Plan& plan);

}  // namespace madpipe::plan
