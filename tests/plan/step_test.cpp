// The synchronous step as the runtime runs it: W ops of split stages in the bubbles, within a
// memory budget; the lowered program follows it; the planner's step prediction.

#include "plan/step.hpp"

#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/program_memory.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;

namespace {

// Modulo-scheduled plans of random chains whose layers split their backward (W keeps a fifth
// to a half of the stored bytes), contiguous and not, memory ample.
std::vector<mplan::Plan> split_plans() {
  std::vector<mplan::Plan> plans;
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 24; ++trial) {
    const int layers = 3 + trial % 6, num_stages = 2 + trial % (layers - 1);
    const bool contiguous = trial % 2 == 0;
    const int gpus = contiguous ? num_stages : 2 + trial % 3;
    const madpipe::Profile profile =
        mt::with_split_backward(mt::random_chain(rng, layers), 0.2 + 0.1 * (trial % 4));
    const auto stages = mt::random_stages(rng, profile, num_stages, gpus, contiguous);
    const auto platform = mt::huge_memory_platform(gpus);
    for (double factor : {1.2, 2.0})
      if (auto pattern =
              ms::modulo_schedule(stages, platform, factor * mt::busiest_load(stages, platform)))
        plans.push_back(mt::plan_of(stages, platform, *pattern));
  }
  return plans;
}

mplan::SimResult asap(const mplan::Plan& plan, int micro_batches,
                      std::vector<std::int64_t> budget = {}) {
  mplan::SimOptions options;
  options.micro_batches = micro_batches;
  options.policy = mplan::StartPolicy::Asap;
  options.memory_budget_bytes = std::move(budget);
  return mplan::simulate(plan, options);
}

// What the runtime's program of the plan's step holds on each GPU (program_memory.hpp).
std::vector<std::int64_t> program_peaks(const mplan::Plan& plan, int micro_batches) {
  mplan::LowerOptions options;
  options.micro_batches = micro_batches;
  for (const ms::Stage& stage : plan.stages) options.message_bytes.push_back(stage.output_bytes);
  std::vector<std::int64_t> peaks;
  for (const mplan::ProgramMemory& memory :
       mplan::program_memory(plan, mplan::lower(plan, options)))
    peaks.push_back(memory.peak_bytes);
  return peaks;
}

std::string token(const mplan::SimOp& op) {
  return ms::op_token(op.kind, op.stage, op.micro_batch);
}

}  // namespace

TEST(Step, EachGpuRunsAllItsOpsOneAfterTheOtherAfterTheirInputs) {
  const std::vector<mplan::Plan> plans = split_plans();
  ASSERT_GE(plans.size(), 25u);
  for (const mplan::Plan& plan : plans) {
    for (int n : {1, 3, 17}) {
      SCOPED_TRACE(std::to_string(plan.stages.size()) + " stages, " + std::to_string(n) +
                   " micro-batches");
      const mplan::SimResult step = asap(plan, n);
      ASSERT_EQ(step.per_gpu.size(), static_cast<std::size_t>(plan.platform.gpus));
      std::map<std::string, const mplan::SimOp*> by_token;
      for (const mplan::SimOp& op : step.ops) by_token[token(op)] = &op;
      std::size_t compute_ops = 0;
      for (int g = 0; g < plan.platform.gpus; ++g) {
        double free_at = 0;
        for (const mplan::SimOp& op : step.per_gpu[g]) {
          ++compute_ops;
          EXPECT_EQ(plan.stages[op.stage].gpu, g) << token(op);
          EXPECT_GE(op.start_ms, free_at - 1e-9) << token(op);
          free_at = op.end_ms;
          // W after its B; B after its F.
          if (op.kind == OpKind::W) {
            const mplan::SimOp* b = by_token.at(ms::op_token(OpKind::B, op.stage, op.micro_batch));
            EXPECT_GE(op.start_ms, b->end_ms - 1e-9) << token(op);
          } else if (op.kind == OpKind::B) {
            const mplan::SimOp* f = by_token.at(ms::op_token(OpKind::F, op.stage, op.micro_batch));
            EXPECT_GE(op.start_ms, f->end_ms - 1e-9) << token(op);
          }
        }
      }
      std::size_t expected = 0;
      for (const mplan::SimOp& op : step.ops)
        if (!ms::is_transfer(op.kind)) ++expected;
      EXPECT_EQ(compute_ops, expected);
      EXPECT_GE(step.step_ms, mplan::step_lower_bound_ms(plan, n) * (1 - 1e-9));
    }
  }
}

TEST(Step, WaitingWeightGradientsStayWithinTheBudget) {
  int waited_longer = 0;
  for (const mplan::Plan& plan : split_plans()) {
    for (int n : {2, 9, 24}) {
      SCOPED_TRACE(std::to_string(plan.stages.size()) + " stages, " + std::to_string(n) +
                   " micro-batches");
      // The plan's predicted memory by default: never above it.
      const mplan::SimResult tight = asap(plan, n);
      for (int g = 0; g < plan.platform.gpus; ++g)
        EXPECT_LE(tight.peak_memory_bytes[g], plan.predicted.memory_bytes[g]) << "gpu " << g;
      // A larger budget: W may wait longer, never beyond it, and the step is never longer.
      std::vector<std::int64_t> budget = plan.predicted.memory_bytes;
      for (std::int64_t& bytes : budget) bytes += bytes / 4;
      const mplan::SimResult loose = asap(plan, n, budget);
      for (int g = 0; g < plan.platform.gpus; ++g)
        EXPECT_LE(loose.peak_memory_bytes[g], budget[g]) << "gpu " << g;
      if (loose.peak_memory_bytes != tight.peak_memory_bytes) ++waited_longer;
    }
  }
  EXPECT_GE(waited_longer, 5);
}

TEST(Step, TheLoweredStepRunsTheSimulatedOrder) {
  for (const mplan::Plan& plan : split_plans()) {
    for (int n : {1, 5, 16}) {
      SCOPED_TRACE(std::to_string(plan.stages.size()) + " stages, " + std::to_string(n) +
                   " micro-batches");
      const mplan::SimResult step = asap(plan, n);
      const mplan::Program program = mplan::lower(plan, n);
      EXPECT_EQ(mplan::dry_run(program), "");
      for (int g = 0; g < plan.platform.gpus; ++g) {
        std::vector<std::string> lowered, simulated;
        for (const mplan::Instr& instr : program.per_gpu[g])
          if (instr.kind == mplan::InstrKind::Forward || instr.kind == mplan::InstrKind::Backward ||
              instr.kind == mplan::InstrKind::BackwardWeight)
            lowered.push_back(mplan::to_string(instr));
        for (const mplan::SimOp& op : step.per_gpu[g])
          simulated.push_back(op.kind == OpKind::W ? "W" + std::to_string(op.stage) + "." +
                                                         std::to_string(op.micro_batch)
                                                   : token(op));
        EXPECT_EQ(lowered, simulated) << "gpu " << g;
      }
    }
  }
}

TEST(Step, ThePredictionIsWhatTheRuntimeRuns) {
  for (mplan::Plan plan : split_plans()) {
    const int m = 2 * static_cast<int>(plan.stages.size());
    const std::vector<std::int64_t> before = plan.predicted.memory_bytes;
    const std::vector<std::int64_t> budget = mplan::step_memory_budget(plan);
    const mplan::SimResult planned = asap(plan, m, budget);
    mplan::predict_step(plan, m);
    ASSERT_TRUE(plan.predicted.step.has_value());
    EXPECT_EQ(plan.predicted.step->micro_batches, m);
    EXPECT_DOUBLE_EQ(plan.predicted.step->time_ms, planned.step_ms);
    EXPECT_GE(plan.predicted.step->bubble, 0.0);
    EXPECT_LT(plan.predicted.step->bubble, 1.0);
    EXPECT_NEAR(plan.predicted.step->bubble, mplan::bubble_fraction(planned, plan.platform.gpus),
                1e-12);
    // The W ops wait within the busiest GPU's peak; the predicted memory covers the step and what
    // its program holds.
    const std::vector<std::int64_t> program = program_peaks(plan, m);
    for (int g = 0; g < plan.platform.gpus; ++g) {
      SCOPED_TRACE("gpu " + std::to_string(g));
      EXPECT_LE(planned.peak_memory_bytes[g], budget[g]);
      EXPECT_EQ(plan.predicted.memory_bytes[g],
                std::max({before[g], planned.peak_memory_bytes[g], program[g]}));
    }
    EXPECT_TRUE(mplan::validate(plan).empty());
    // simulate_step, and the runtime's lowering, run that step.
    EXPECT_DOUBLE_EQ(asap(plan, m).step_ms, planned.step_ms);
    EXPECT_DOUBLE_EQ(mplan::simulate_step(plan, m).step_ms, planned.step_ms);
    // It survives the plan's JSON.
    std::ostringstream text;
    mplan::write_plan(plan, text);
    const mplan::Plan read = mplan::plan_from_json(nlohmann::json::parse(text.str()), "p.json");
    ASSERT_TRUE(read.predicted.step.has_value());
    EXPECT_EQ(read.predicted.step->micro_batches, m);
    EXPECT_DOUBLE_EQ(read.predicted.step->time_ms, plan.predicted.step->time_ms);
    EXPECT_DOUBLE_EQ(read.predicted.step->bubble, plan.predicted.step->bubble);
  }
}

// Where the step's program would not fit the platform, its W ops wait within each GPU's own
// peak: the step of a plan that never planned one, and the same predicted memory.
TEST(Step, AProgramAboveThePlatformsMemoryKeepsEachGpusOwnPeak) {
  int fell_back = 0;
  for (mplan::Plan plan : split_plans()) {
    const int m = 2 * static_cast<int>(plan.stages.size());
    const std::vector<std::int64_t> own =
        ms::totals(ms::evaluate_memory(plan.stages, plan.pattern, plan.platform));
    plan.platform.memory_bytes = *std::max_element(own.begin(), own.end());
    plan.predicted.memory_bytes = own;
    mplan::Plan tried = plan;
    const mplan::SimResult busiest = asap(plan, m, mplan::step_memory_budget(plan));
    for (int g = 0; g < plan.platform.gpus; ++g)
      tried.predicted.memory_bytes[g] = std::max(own[g], busiest.peak_memory_bytes[g]);
    const std::vector<std::int64_t> program = program_peaks(tried, m);
    if (std::none_of(program.begin(), program.end(),
                     [&](std::int64_t bytes) { return bytes > plan.platform.memory_bytes; }))
      continue;
    ++fell_back;
    const mplan::SimResult steady = asap(plan, m);
    mplan::predict_step(plan, m);
    EXPECT_EQ(plan.predicted.memory_bytes, own);
    EXPECT_DOUBLE_EQ(plan.predicted.step->time_ms, steady.step_ms);
    EXPECT_DOUBLE_EQ(mplan::simulate_step(plan, m).step_ms, steady.step_ms);
  }
  EXPECT_GT(fell_back, 0);
}

TEST(Step, TheBudgetIsTheBusiestGpusPatternPeakWithinThePlatformsMemory) {
  for (mplan::Plan plan : split_plans()) {
    const std::vector<std::int64_t> peaks =
        ms::totals(ms::evaluate_memory(plan.stages, plan.pattern, plan.platform));
    const std::int64_t busiest = *std::max_element(peaks.begin(), peaks.end());
    EXPECT_EQ(mplan::step_memory_budget(plan), std::vector<std::int64_t>(peaks.size(), busiest));
    plan.platform.memory_bytes = (busiest + *std::min_element(peaks.begin(), peaks.end())) / 2;
    const std::vector<std::int64_t> capped = mplan::step_memory_budget(plan);
    for (std::size_t g = 0; g < peaks.size(); ++g)
      EXPECT_EQ(capped[g], std::max(peaks[g], plan.platform.memory_bytes)) << "gpu " << g;
  }
}

TEST(Step, BadStepsAreRefusedNamingTheField) {
  mplan::Plan plan = split_plans().front();
  EXPECT_THROW(mplan::predict_step(plan, 0), madpipe::Error);
  mplan::predict_step(plan, 4);
  nlohmann::json j = mplan::plan_to_json(plan);
  j["predicted"]["step"]["micro_batches"] = 0;
  try {
    mplan::plan_from_json(j, "p.json");
    FAIL() << "a step of 0 micro-batches was read";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/predicted/step/micro_batches"), std::string::npos)
        << e.what();
  }
  j = mplan::plan_to_json(plan);
  j["predicted"]["step"]["time_ms"] = -1;
  EXPECT_THROW(mplan::plan_from_json(j, "p.json"), madpipe::Error);
}
