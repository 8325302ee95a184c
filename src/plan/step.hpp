#pragma once

#include "plan/plan.hpp"
#include "plan/simulate.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::plan {

// One synchronous step of `micro_batches` as the runtime runs it (simulate's Asap policy): W
// ops of split stages wait, within the plan's predicted memory, where they fill the warm-up's
// and drain's bubbles.
SimResult simulate_step(const Plan& plan, int micro_batches);

// What a step may hold on each GPU while its W ops wait: step_memory_cap_bytes(), never less
// than the GPU's own pattern peak.
std::vector<std::int64_t> step_memory_budget(const Plan& plan);

// Sets plan.predicted.step from the simulated step of `micro_batches`. On a plan with split
// stages their W ops wait within step_memory_budget(), and plan.predicted.memory_bytes rises to
// the step's peaks and to what the runtime's program of that step holds by the memory model
// (program_memory(), the plan's stage outputs as messages), so that the runtime holds no more
// than predicted; the lowering and simulate_step(), whose W ops wait within the predicted memory
// capped at step_memory_cap_bytes(), run this very step. Where that program would not fit the
// platform's memory, and on plans without split stages, the W ops wait within each GPU's own
// pattern peak and the predicted memory stays. A plan with a step order for `micro_batches`
// (Plan::step_order) runs it, its predicted memory raised to what that step and its program
// hold; where that exceeds the platform's memory, or the order is for another number of
// micro-batches, the order is dropped and the step follows the pattern as above. Throws
// Error{InvalidInput} as simulate() does for an invalid plan, and for micro_batches < 1.
void predict_step(Plan& plan, int micro_batches);

// The share of P x step_ms the GPUs are idle in `step` (0 where step_ms is 0).
double bubble_fraction(const SimResult& step, int gpus);

// No step of `micro_batches` on the plan's stages is shorter: some GPU g runs micro_batches
// times its compute per micro-batch, and none of it before micro-batch 0's forwards and
// transfers reach g's first stage (on the zero-bubble paper's uniform case, (p - 1) F + m (F + B
// + W), which ZB-H1 reaches). A tied weight's exchange comes on top.
double step_lower_bound_ms(const Plan& plan, int micro_batches);

}  // namespace madpipe::plan
