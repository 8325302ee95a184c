#pragma once

#include "plan/plan.hpp"
#include "plan/simulate.hpp"

namespace madpipe::plan {

// One synchronous step of `micro_batches` as the runtime runs it (simulate's Asap policy): W
// ops of split stages wait, within the plan's predicted memory, where they fill the warm-up's
// and drain's bubbles.
SimResult simulate_step(const Plan& plan, int micro_batches);

// Sets plan.predicted.step from simulate_step(). Throws Error{InvalidInput} as simulate() does
// for an invalid plan, and for micro_batches < 1.
void predict_step(Plan& plan, int micro_batches);

// The share of P x step_ms the GPUs are idle in `step` (0 where step_ms is 0).
double bubble_fraction(const SimResult& step, int gpus);

// No step of `micro_batches` on the plan's stages is shorter: some GPU g runs micro_batches
// times its compute per micro-batch, and none of it before micro-batch 0's forwards and
// transfers reach g's first stage (on the zero-bubble paper's uniform case, (p - 1) F + m (F + B
// + W), which ZB-H1 reaches). A tied weight's exchange comes on top.
double step_lower_bound_ms(const Plan& plan, int micro_batches);

}  // namespace madpipe::plan
