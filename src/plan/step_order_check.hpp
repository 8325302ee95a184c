#pragma once

#include "plan/plan.hpp"
#include "plan/validate.hpp"

#include <vector>

namespace madpipe::plan {

// The rules of a plan's step order (formats.md): one list per GPU, each op of the step (F and B
// of every stage, W of split ones, micro-batches 0..micro_batches-1) exactly once, on its stage's
// GPU, F before B before W of one micro-batch, an order that runs to the end (no GPU waits for
// an op that another GPU's order puts after one that waits for it), and the predicted step's
// micro-batches equal to the order's. `stages_ok`: the stages passed their own checks; the
// order is run only then.
std::vector<Violation> step_order_violations(const Plan& plan, bool stages_ok);

}  // namespace madpipe::plan
