#include "plan/step.hpp"

#include "core/error.hpp"
#include "plan/program.hpp"
#include "plan/program_memory.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

namespace madpipe::plan {

// Asap options for a step of `micro_batches`; throws for fewer than one.
static SimOptions step_options(int micro_batches) {
  if (micro_batches < 1)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "a step needs at least one micro-batch, got " + std::to_string(micro_batches));
  SimOptions options;
  options.micro_batches = micro_batches;
  options.policy = StartPolicy::Asap;
  return options;
}

SimResult simulate_step(const Plan& plan, int micro_batches) {
  return simulate(plan, step_options(micro_batches));
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

std::vector<std::int64_t> step_memory_budget(const Plan& plan) {
  std::vector<std::int64_t> budget =
      schedule::totals(schedule::evaluate_memory(plan.stages, plan.pattern, plan.platform));
  const std::int64_t cap = step_memory_cap_bytes(plan);
  for (std::int64_t& bytes : budget) bytes = std::max(bytes, cap);
  return budget;
}

// The plan with its predicted memory raised to what `step` holds on each GPU.
static Plan with_step_memory(Plan plan, const SimResult& step) {
  std::vector<std::int64_t>& memory = plan.predicted.memory_bytes;
  memory.resize(step.peak_memory_bytes.size(), 0);
  for (std::size_t g = 0; g < memory.size(); ++g)
    memory[g] = std::max(memory[g], step.peak_memory_bytes[g]);
  return plan;
}

// What the runtime's program of the plan's step holds on each GPU, by the memory model applied
// instruction by instruction (program_memory.hpp): its receive arena as posted, each send until
// it completes.
static std::vector<std::int64_t> program_peaks(const Plan& plan, int micro_batches) {
  LowerOptions options;
  options.micro_batches = micro_batches;
  for (const schedule::Stage& stage : plan.stages)
    options.message_bytes.push_back(stage.output_bytes);
  const Program program = lower(plan, options);
  std::vector<std::int64_t> peaks;
  for (const ProgramMemory& memory : program_memory(plan, program))
    peaks.push_back(memory.peak_bytes);
  return peaks;
}

// The step with the W ops of split stages waiting within step_memory_budget(), and the plan
// with its predicted memory raised to what that step holds and to what the step's program holds
// (the runtime's receives and sends may hold more than the memory model's buffer per cut, and
// its B holds its W's kept bytes before it frees its stored ones); nullopt where that program
// would not fit the platform's memory.
static std::optional<std::pair<SimResult, Plan>> step_within_busiest_peak(const Plan& plan,
                                                                          int micro_batches) {
  SimOptions options = step_options(micro_batches);
  options.memory_budget_bytes = step_memory_budget(plan);
  SimResult step = simulate(plan, options);
  Plan raised = with_step_memory(plan, step);
  const std::vector<std::int64_t> program = program_peaks(raised, micro_batches);
  if (program.size() != raised.predicted.memory_bytes.size()) return std::nullopt;
  for (std::size_t g = 0; g < program.size(); ++g) {
    if (plan.platform.memory_bytes > 0 && program[g] > plan.platform.memory_bytes)
      return std::nullopt;
    raised.predicted.memory_bytes[g] = std::max(raised.predicted.memory_bytes[g], program[g]);
  }
  return std::make_pair(std::move(step), std::move(raised));
}

// The step in the plan's step order, and the plan with its predicted memory raised to what that
// step and its program hold; nullopt where they would not fit the platform's memory.
static std::optional<std::pair<SimResult, Plan>> step_in_order(const Plan& plan,
                                                               int micro_batches) {
  SimResult step = simulate(plan, step_options(micro_batches));
  Plan raised = with_step_memory(plan, step);
  const std::vector<std::int64_t> program = program_peaks(raised, micro_batches);
  std::vector<std::int64_t>& memory = raised.predicted.memory_bytes;
  for (std::size_t g = 0; g < memory.size(); ++g) {
    if (g < program.size()) memory[g] = std::max(memory[g], program[g]);
    if (plan.platform.memory_bytes > 0 && memory[g] > plan.platform.memory_bytes)
      return std::nullopt;
  }
  return std::make_pair(std::move(step), std::move(raised));
}

void predict_step(Plan& plan, int micro_batches) {
  const bool splits = std::any_of(plan.stages.begin(), plan.stages.end(),
                                  [](const schedule::Stage& s) { return s.splits_backward(); });
  std::optional<std::pair<SimResult, Plan>> within_busiest;
  if (plan.step_order && plan.step_order->micro_batches != micro_batches) plan.step_order.reset();
  if (plan.step_order) {
    within_busiest = step_in_order(plan, micro_batches);
    if (!within_busiest) plan.step_order.reset();
  }
  if (splits && !within_busiest) within_busiest = step_within_busiest_peak(plan, micro_batches);
  SimResult step;
  if (within_busiest) {
    step = std::move(within_busiest->first);
    plan = std::move(within_busiest->second);
  } else {
    step = simulate(plan, step_options(micro_batches));
  }
  StepPrediction predicted;
  predicted.micro_batches = micro_batches;
  predicted.time_ms = step.step_ms + plan.predicted.tied_exchange_ms;
  predicted.bubble = bubble_fraction(step, plan.platform.gpus);
  plan.predicted.step = predicted;
}

}  // namespace madpipe::plan
