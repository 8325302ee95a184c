#include "plan/step.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace madpipe::plan {

SimResult simulate_step(const Plan& plan, int micro_batches) {
  if (micro_batches < 1)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "a step needs at least one micro-batch, got " + std::to_string(micro_batches));
  SimOptions options;
  options.micro_batches = micro_batches;
  options.policy = StartPolicy::Asap;
  return simulate(plan, options);
}

double bubble_fraction(const SimResult& step, int gpus) {
  if (!(step.step_ms > 0) || gpus < 1) return 0;
  double busy = 0;
  for (const std::vector<SimOp>& ops : step.per_gpu)
    for (const SimOp& op : ops) busy += op.end_ms - op.start_ms;
  return std::max(0.0, 1 - busy / (gpus * step.step_ms));
}

double step_lower_bound_ms(const Plan& plan, int micro_batches) {
  const int gpus = plan.platform.gpus;
  std::vector<double> load(gpus, 0.0);
  std::vector<double> first_start(gpus, std::numeric_limits<double>::infinity());
  double elapsed = 0;
  for (const schedule::Op& op : schedule::micro_batch_chain(plan.stages, plan.platform)) {
    if (!schedule::is_transfer(op.kind)) {
      load[op.gpu] += op.duration_ms;
      if (op.kind == schedule::OpKind::F)
        first_start[op.gpu] = std::min(first_start[op.gpu], elapsed);
    }
    elapsed += op.duration_ms;
  }
  for (const schedule::Op& w : schedule::weight_ops(plan.stages))
    load[plan.stages[w.stage].gpu] += w.duration_ms;
  double bound = 0;
  for (int g = 0; g < gpus; ++g)
    if (load[g] > 0) bound = std::max(bound, first_start[g] + micro_batches * load[g]);
  return bound + plan.predicted.tied_exchange_ms;
}

void predict_step(Plan& plan, int micro_batches) {
  const SimResult step = simulate_step(plan, micro_batches);
  StepPrediction predicted;
  predicted.micro_batches = micro_batches;
  predicted.time_ms = step.step_ms + plan.predicted.tied_exchange_ms;
  predicted.bubble = bubble_fraction(step, plan.platform.gpus);
  plan.predicted.step = predicted;
}

}  // namespace madpipe::plan
