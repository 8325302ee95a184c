// Split backward (zero-bubble): B computes the input gradient, W the weight gradient, placed
// wherever its GPU is idle after B. Patterns, memory, validation, simulation and lowering.

#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/simulate.hpp"
#include "plan/torch_schedule.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/pattern.hpp"
#include "schedule/search.hpp"
#include "schedule/weight_placement.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
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

// Every stage defers `fraction` of its backward to W and keeps `kept` bytes until W.
std::vector<ms::Stage> split(std::vector<ms::Stage> stages, double fraction,
                             std::int64_t kept = 0) {
  for (ms::Stage& stage : stages) {
    stage.backward_weight_ms = stage.backward_ms * fraction;
    stage.weight_kept_bytes = kept;
  }
  return stages;
}

int count_ops(const ms::Pattern& pattern, OpKind kind) {
  return static_cast<int>(std::count_if(pattern.ops.begin(), pattern.ops.end(),
                                        [&](const ms::Op& op) { return op.kind == kind; }));
}

// Four stages, F = 1, B = 2 (I = 1 and W = 1 when split), one stored byte each.
std::vector<ms::Stage> four_stages() { return mt::chain_stages({1, 1, 1, 1}, {2, 2, 2, 2}); }

madpipe::Platform bytes_platform(int gpus, std::int64_t memory_bytes) {
  madpipe::Platform platform = mt::small_platform(gpus);
  platform.memory_bytes = memory_bytes;
  platform.weight_copies = 1;
  return platform;
}

}  // namespace

TEST(SplitBackward, ChainHasShorterBackwardsAndWeightOpsOnTheSide) {
  const auto stages = split(four_stages(), 0.5);
  const auto platform = bytes_platform(4, 1000);
  const auto chain = ms::micro_batch_chain(stages, platform);
  for (const ms::Op& op : chain) {
    EXPECT_NE(op.kind, OpKind::W);
    if (op.kind == OpKind::B) {
      EXPECT_DOUBLE_EQ(op.duration_ms, 1.0);
    }
  }
  const auto weights = ms::weight_ops(stages);
  ASSERT_EQ(weights.size(), 4u);
  EXPECT_EQ(weights.front().stage, 3);  // the order B ops run in
  EXPECT_EQ(weights.back().stage, 0);
  EXPECT_DOUBLE_EQ(weights.front().duration_ms, 1.0);
  EXPECT_TRUE(ms::weight_ops(four_stages()).empty());
  EXPECT_EQ(ms::op_kind_from_string("W"), OpKind::W);
  EXPECT_STREQ(ms::to_string(OpKind::W), "W");
}

TEST(SplitBackward, PatternsWithoutSplitStagesAreUntouched) {
  const auto stages = four_stages();
  const auto platform = bytes_platform(4, 1000);
  const auto pattern = ms::one_f_one_b_star(stages, platform, 3.0);
  ASSERT_TRUE(pattern.has_value());
  const auto placed = ms::with_weight_ops(*pattern, stages, platform);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(*placed, *pattern);
  EXPECT_EQ(count_ops(*placed, OpKind::W), 0);
}

TEST(SplitBackward, OneFOneBStarPlacesOneWPerStageAfterItsB) {
  const auto stages = split(four_stages(), 0.5);
  const auto platform = bytes_platform(4, 1000);
  const auto pattern = ms::one_f_one_b_star(stages, platform, 3.0);
  ASSERT_TRUE(pattern.has_value());
  EXPECT_EQ(count_ops(*pattern, OpKind::W), 4);
  const auto violations = mplan::validate(mt::plan_of(stages, platform, *pattern));
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

// The split shortens the round trip F -> B of a micro-batch: 1F1B* groups more stages at the
// same period, so fewer micro-batches are in flight (thesis: NCA of group g is g).
TEST(SplitBackward, SplitKeepsFewerMicroBatchesInFlightAtTheSamePeriod) {
  const auto platform = bytes_platform(4, 1000);
  const auto whole = ms::one_f_one_b_star(four_stages(), platform, 4.0);
  const auto stages = split(four_stages(), 0.5);
  const auto with_split = ms::one_f_one_b_star(stages, platform, 4.0);
  ASSERT_TRUE(whole && with_split);
  const auto nca_whole = ms::concurrent_activations(*whole, 4);
  const auto nca_split = ms::concurrent_activations(*with_split, 4);
  EXPECT_EQ(nca_whole, (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(nca_split, (std::vector<int>{2, 2, 1, 1}));
  const auto violations = mplan::validate(mt::plan_of(stages, platform, *with_split));
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
}

// Under a memory limit of two in-flight micro-batches per GPU, the split gives a shorter period.
TEST(SplitBackward, UnderTightMemoryTheSplitShortensThePeriod) {
  const auto platform = bytes_platform(4, 2);
  const auto whole = ms::schedule_under_memory(four_stages(), platform);
  const auto stages = split(four_stages(), 0.5);
  const auto with_split = ms::schedule_under_memory(stages, platform);
  ASSERT_TRUE(whole && with_split);
  EXPECT_LT(with_split->pattern.normalized_period_ms(),
            whole->pattern.normalized_period_ms() * (1 - 1e-6))
      << "whole " << whole->method << " " << whole->pattern.normalized_period_ms() << ", split "
      << with_split->method << " " << with_split->pattern.normalized_period_ms();
  const auto violations = mplan::validate(mt::plan_of(stages, platform, with_split->pattern));
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  for (std::int64_t bytes : ms::totals(ms::evaluate_memory(stages, with_split->pattern, platform)))
    EXPECT_LE(bytes, 2);
}

// What W keeps counts from the end of B to the end of W; stored bytes are freed at the end of B.
TEST(SplitBackward, MemoryCountsKeptBytesUntilW) {
  auto stages = mt::chain_stages({1}, {2});
  stages[0].stored_bytes = 10;
  stages[0].backward_weight_ms = 1;
  stages[0].weight_kept_bytes = 4;
  const auto platform = bytes_platform(1, 1000);
  ms::Pattern pattern;
  pattern.period_ms = 3;
  pattern.ops = {{OpKind::F, 0, 0, {}, 0.0, 1.0, 0},
                 {OpKind::B, 0, 0, {}, 1.0, 1.0, 0},
                 {OpKind::W, 0, 0, {}, 2.0, 1.0, 0}};
  EXPECT_EQ(ms::evaluate_memory(stages, pattern, platform)[0].activations, 10);
  // W one period later: micro-batch i keeps 4 bytes while i + 1 stores 10.
  pattern.ops[2].shift = -1;
  EXPECT_EQ(ms::evaluate_memory(stages, pattern, platform)[0].activations, 14);
  const auto violations = mplan::validate(mt::plan_of(stages, platform, pattern));
  EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  // Kept bytes larger than the stored ones peak at the end of B.
  stages[0].weight_kept_bytes = 12;
  pattern.ops[2].shift = 0;
  EXPECT_EQ(ms::evaluate_memory(stages, pattern, platform)[0].activations, 12);
}

TEST(SplitBackward, ValidatorChecksWOps) {
  auto stages = mt::chain_stages({1}, {2});
  stages[0].backward_weight_ms = 1;
  const auto platform = bytes_platform(1, 1000);
  ms::Pattern pattern;
  pattern.period_ms = 3;
  pattern.ops = {{OpKind::F, 0, 0, {}, 0.0, 1.0, 0}, {OpKind::B, 0, 0, {}, 1.0, 1.0, 0}};
  auto text = [&](const ms::Pattern& p, const std::vector<ms::Stage>& s) {
    return mt::describe(mplan::validate(mt::plan_of(s, platform, p)));
  };
  EXPECT_NE(text(pattern, stages).find("missing W0"), std::string::npos) << text(pattern, stages);
  // W before B ends.
  pattern.ops.push_back({OpKind::W, 0, 0, {}, 2.0, 1.0, 1});
  EXPECT_NE(text(pattern, stages).find("W depends on B"), std::string::npos)
      << text(pattern, stages);
  // W of the wrong length, B of the whole backward.
  pattern.ops[2].shift = 0;
  pattern.ops[1].duration_ms = 2.0;
  pattern.ops[2].start_ms = 0.0;
  pattern.ops[2].duration_ms = 0.5;
  const std::string wrong = text(pattern, stages);
  EXPECT_NE(wrong.find("backward_ms - backward_weight_ms"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("must equal backward_weight_ms"), std::string::npos) << wrong;
  // W for a stage that does not split.
  pattern.ops[1].duration_ms = 2.0;
  pattern.ops[2] = {OpKind::W, 0, 0, {}, 0.0, 1.0, -1};
  const std::string unsplit = text(pattern, mt::chain_stages({1}, {2}));
  EXPECT_NE(unsplit.find("W is not allowed for stage 0"), std::string::npos) << unsplit;
  // More backward deferred than the backward.
  auto bad = stages;
  bad[0].backward_weight_ms = 3;
  EXPECT_NE(text(pattern, bad).find("backward_weight_ms"), std::string::npos);
}

TEST(SplitBackward, PlanJsonKeepsTheSplitAndOmitsItWhenAbsent) {
  const auto platform = bytes_platform(4, 1000);
  const auto stages = split(four_stages(), 0.5, 7);
  const auto plan = mt::plan_of(stages, platform, *ms::one_f_one_b_star(stages, platform, 3.0));
  std::ostringstream out;
  mplan::write_plan(plan, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("\"backward_weight_ms\""), std::string::npos);
  EXPECT_NE(text.find("\"weight_kept_bytes\": 7"), std::string::npos);
  EXPECT_NE(text.find("\"kind\": \"W\""), std::string::npos);
  const mplan::Plan back = mplan::plan_from_json(mplan::plan_to_json(plan));
  EXPECT_EQ(back.stages, plan.stages);
  EXPECT_EQ(back.pattern, plan.pattern);
  const auto whole =
      mt::plan_of(four_stages(), platform, *ms::one_f_one_b_star(four_stages(), platform, 3.0));
  std::ostringstream whole_out;
  mplan::write_plan(whole, whole_out);
  EXPECT_EQ(whole_out.str().find("backward_weight_ms"), std::string::npos);
  EXPECT_EQ(whole_out.str().find("weight_kept_bytes"), std::string::npos);
}

// Random allocations (contiguous or not), random splits, every family at several periods: each
// pattern found passes the validator, and the simulator runs it at its period.
TEST(SplitBackward, RandomPatternsAreValidAndRunAtTheirPeriod) {
  std::mt19937 rng(20261127);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const bool contiguous = trial % 2 == 0;
    const int gpus = 2 + static_cast<int>(rng() % 3);
    const int num_stages = contiguous ? gpus : gpus + static_cast<int>(rng() % 3);
    auto stages = mt::random_stages(rng, num_stages + static_cast<int>(rng() % 5), num_stages, gpus,
                                    contiguous);
    for (ms::Stage& stage : stages)
      if (rng() % 4 != 0) {
        stage.backward_weight_ms = stage.backward_ms * (0.2 + 0.6 * (rng() % 100) / 100.0);
        stage.weight_kept_bytes = static_cast<std::int64_t>(rng() % 1000);
      }
    const madpipe::Platform platform = mt::huge_memory_platform(gpus);
    const double busiest = ms::busiest_resource_ms(stages, platform);
    for (double factor : {1.0, 1.2, 1.7, 3.0}) {
      const double period = busiest * factor;
      std::vector<ms::Pattern> found;
      if (contiguous)
        if (auto p = ms::one_f_one_b_star(stages, platform, period)) found.push_back(*p);
      if (auto p = ms::guided_modulo_schedule(stages, platform, period)) found.push_back(*p);
      if (auto p = ms::modulo_schedule(stages, platform, period)) found.push_back(*p);
      if (auto p =
              ms::modulo_schedule(stages, platform, period, ms::ModuloDirection::AsLateAsPossible))
        found.push_back(*p);
      for (const ms::Pattern& pattern : found) {
        const mplan::Plan plan = mt::plan_of(stages, platform, pattern);
        const auto violations = mplan::validate(plan);
        ASSERT_TRUE(violations.empty()) << mt::describe(violations);
        const mplan::SimResult run = mplan::simulate(plan);
        EXPECT_NEAR(run.steady_normalized_ms, pattern.normalized_period_ms(),
                    1e-6 * pattern.normalized_period_ms());
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(SplitBackward, ScheduleSearchFindsValidSplitPatterns) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    const bool contiguous = trial % 2 == 0;
    const int gpus = 2 + static_cast<int>(rng() % 3);
    auto stages =
        split(mt::random_stages(rng, 6, contiguous ? gpus : gpus + 1, gpus, contiguous), 0.5, 100);
    const madpipe::Platform platform = mt::huge_memory_platform(gpus);
    const auto found = ms::schedule_under_memory(stages, platform);
    ASSERT_TRUE(found.has_value());
    const auto violations = mplan::validate(mt::plan_of(stages, platform, found->pattern));
    EXPECT_TRUE(violations.empty()) << found->method << ": " << mt::describe(violations);
    EXPECT_EQ(count_ops(found->pattern, OpKind::W),
              found->pattern.k * gpus + (contiguous ? 0 : found->pattern.k));
  }
}

TEST(SplitBackward, LoweringRunsWAfterBAndStepsAfterTheLastW) {
  const auto platform = bytes_platform(4, 1000);
  const auto stages = split(four_stages(), 0.5);
  const auto plan = mt::plan_of(stages, platform, *ms::one_f_one_b_star(stages, platform, 3.0));
  const int n = 6;
  mplan::LowerOptions options;
  options.micro_batches = n;
  options.update_micro_batches = n;
  const mplan::Program program = mplan::lower(plan, options);
  for (int g = 0; g < 4; ++g) {
    const auto& list = program.per_gpu[g];
    std::vector<int> b_at(n, -1), w_at(n, -1);
    int step_at = -1;
    for (int k = 0; k < static_cast<int>(list.size()); ++k) {
      if (list[k].kind == mplan::InstrKind::Backward) b_at[list[k].micro_batch] = k;
      if (list[k].kind == mplan::InstrKind::BackwardWeight) w_at[list[k].micro_batch] = k;
      if (list[k].kind == mplan::InstrKind::OptimizerStep) step_at = k;
    }
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(w_at[i], 0) << "gpu " << g << " micro-batch " << i;
      EXPECT_LT(b_at[i], w_at[i]);
      EXPECT_LT(w_at[i], step_at);
    }
  }
  const auto csv = mplan::torch_schedule_csv(mplan::torch_schedule(plan, n));
  EXPECT_NE(csv.find("0I0"), std::string::npos) << csv;
  EXPECT_NE(csv.find("0W0"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("0B0"), std::string::npos) << csv;
}
