#include "plan/simulate.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;

namespace {

// Three stages on GPUs 0, 1, 0, one micro-batch at a time.
mplan::Plan interleaved_plan() {
  const auto profile = mt::make_chain({1, 2, 3}, {2, 3, 4}, {10, 20, 30}, {100, 200, 300}, 50);
  return mt::chain_plan(profile, {0, 1, 2}, {0, 1, 0}, mt::small_platform(2), 0);
}

// 1F1B on four GPUs, free transfers, period 3; activations come from saved bytes.
mplan::Plan one_f_one_b_plan() {
  auto profile = mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {5, 5, 5, 5});
  for (std::size_t l = 0; l < profile.layers.size(); ++l)
    profile.layers[l].saved_bytes = 1000 * static_cast<std::int64_t>(l + 1);
  return mt::chain_plan(profile, {0, 1, 2, 3}, {0, 1, 2, 3}, mt::small_platform(4), 3.0);
}

std::vector<mplan::Plan> valid_plans() {
  return {mt::pipelined_plan(), interleaved_plan(), one_f_one_b_plan(),
          mt::repeated(mt::pipelined_plan(), 2), mt::repeated(one_f_one_b_plan(), 3)};
}

std::string describe(const mplan::Plan& plan) {
  std::ostringstream out;
  out << plan.stages.size() << " stages, k=" << plan.pattern.k << ", T=" << plan.pattern.period_ms;
  return out.str();
}

const mplan::SimOp* find_sim_op(const mplan::SimResult& sim, OpKind kind, int stage,
                                int micro_batch) {
  for (const mplan::SimOp& op : sim.ops)
    if (op.kind == kind && op.stage == stage && op.micro_batch == micro_batch) return &op;
  return nullptr;
}

}  // namespace

TEST(Simulate, HandMadePlansAreValid) {
  for (const mplan::Plan& plan : valid_plans())
    EXPECT_TRUE(mplan::validate(plan).empty()) << describe(plan);
}

TEST(Simulate, TimetableSteadyPeriodEqualsThePatternPeriod) {
  for (const mplan::Plan& plan : valid_plans()) {
    for (int n : {0, 40}) {
      mplan::SimOptions options;
      options.micro_batches = n;
      const mplan::SimResult sim = mplan::simulate(plan, options);
      const double period = plan.pattern.period_ms;
      EXPECT_NEAR(sim.steady_period_ms, period, 1e-9 * period) << describe(plan);
      EXPECT_NEAR(sim.steady_normalized_ms, period / plan.pattern.k, 1e-9 * period)
          << describe(plan);
    }
  }
}

TEST(Simulate, TimetableRunsOpsAtTheirPlannedTimes) {
  const mplan::Plan plan = mt::pipelined_plan();
  mplan::SimOptions options;
  options.micro_batches = 8;
  const mplan::SimResult sim = mplan::simulate(plan, options);
  EXPECT_EQ(sim.micro_batches, 8);
  // F0 of micro-batch i is planned at 4(i - 1) and B0 at 4i + 1, the earliest at -4.
  for (int i = 0; i < 8; ++i) {
    const mplan::SimOp* f0 = find_sim_op(sim, OpKind::F, 0, i);
    const mplan::SimOp* b0 = find_sim_op(sim, OpKind::B, 0, i);
    ASSERT_NE(f0, nullptr);
    ASSERT_NE(b0, nullptr);
    EXPECT_DOUBLE_EQ(f0->start_ms, 4.0 * i);
    EXPECT_DOUBLE_EQ(f0->end_ms, 4.0 * i + 1);
    EXPECT_DOUBLE_EQ(b0->start_ms, 4.0 * i + 5);
    EXPECT_DOUBLE_EQ(b0->end_ms, 4.0 * i + 7);
    EXPECT_EQ(f0->resource, 0);
  }
  const mplan::SimOp* send = find_sim_op(sim, OpKind::SendAct, 0, 3);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->resource,
            ms::resource_of(plan.pattern.ops[mt::find_op(plan, OpKind::SendAct, 0)], 2));
  EXPECT_DOUBLE_EQ(send->start_ms, 13.0);
  EXPECT_DOUBLE_EQ(sim.step_ms, 4.0 * 7 + 7);
}

TEST(Simulate, OneMicroBatchTakesTheChainLength) {
  for (mplan::StartPolicy policy : {mplan::StartPolicy::Timetable, mplan::StartPolicy::Asap}) {
    mplan::SimOptions options;
    options.micro_batches = 1;
    options.policy = policy;
    const mplan::SimResult sim = mplan::simulate(mt::pipelined_plan(), options);
    EXPECT_DOUBLE_EQ(sim.step_ms, 7.0);
    EXPECT_EQ(sim.ops.size(), 6u);
    EXPECT_EQ(sim.steady_period_ms, 0.0);
  }
}

TEST(Simulate, OpsAreCompleteOrderedAndExclusive) {
  for (const mplan::Plan& plan : valid_plans()) {
    for (mplan::StartPolicy policy : {mplan::StartPolicy::Timetable, mplan::StartPolicy::Asap}) {
      mplan::SimOptions options;
      options.policy = policy;
      const mplan::SimResult sim = mplan::simulate(plan, options);
      const auto chain = ms::micro_batch_chain(plan.stages, plan.platform);
      ASSERT_EQ(sim.ops.size(), chain.size() * static_cast<std::size_t>(sim.micro_batches))
          << describe(plan);
      std::set<std::tuple<int, int, int>> seen;
      std::map<int, std::vector<const mplan::SimOp*>> by_resource;
      double last_end = 0;
      for (std::size_t i = 0; i < sim.ops.size(); ++i) {
        const mplan::SimOp& op = sim.ops[i];
        if (i > 0) {
          EXPECT_LE(sim.ops[i - 1].start_ms, op.start_ms);
        }
        EXPECT_GE(op.start_ms, 0.0);
        EXPECT_GE(op.end_ms, op.start_ms);
        EXPECT_TRUE(seen.insert({static_cast<int>(op.kind), op.stage, op.micro_batch}).second);
        by_resource[op.resource].push_back(&op);
        last_end = std::max(last_end, op.end_ms);
      }
      EXPECT_DOUBLE_EQ(sim.step_ms, last_end);
      EXPECT_EQ(sim.ops.front().start_ms, 0.0);
      const double eps = 1e-9 * plan.pattern.period_ms;
      for (const auto& [resource, ops] : by_resource)
        for (std::size_t i = 1; i < ops.size(); ++i)
          EXPECT_LE(ops[i - 1]->end_ms, ops[i]->start_ms + eps) << "resource " << resource;
      // Each op starts after the one before it in its micro-batch's chain.
      for (int m = 0; m < sim.micro_batches; ++m) {
        for (std::size_t c = 1; c < chain.size(); ++c) {
          const mplan::SimOp* before = find_sim_op(sim, chain[c - 1].kind, chain[c - 1].stage, m);
          const mplan::SimOp* after = find_sim_op(sim, chain[c].kind, chain[c].stage, m);
          ASSERT_NE(before, nullptr);
          ASSERT_NE(after, nullptr);
          EXPECT_LE(before->end_ms, after->start_ms + eps);
        }
      }
    }
  }
}

TEST(Simulate, AsapIsNeverSlowerThanThePattern) {
  for (const mplan::Plan& plan : valid_plans()) {
    mplan::SimOptions options;
    options.micro_batches = 40 * plan.pattern.k;
    options.policy = mplan::StartPolicy::Asap;
    const mplan::SimResult asap = mplan::simulate(plan, options);
    options.policy = mplan::StartPolicy::Timetable;
    const mplan::SimResult timetable = mplan::simulate(plan, options);
    EXPECT_LE(asap.steady_period_ms, plan.pattern.period_ms * (1 + 1e-9)) << describe(plan);
    EXPECT_LE(asap.step_ms, timetable.step_ms * (1 + 1e-9)) << describe(plan);
  }
  // In the two-stage pattern the link order (SEND_ACT0 of micro-batch i+1 after SEND_GRAD0 of
  // micro-batch i) makes the cycle F1 B1 SEND_GRAD0 SEND_ACT0 last 4 ms: no slack.
  mplan::SimOptions options;
  options.micro_batches = 40;
  options.policy = mplan::StartPolicy::Asap;
  EXPECT_NEAR(mplan::simulate(mt::pipelined_plan(), options).steady_period_ms, 4.0, 1e-9);
  // One stage, F [0, 1) and B [1, 3) with a period of 5: as soon as possible it takes 3 ms.
  const auto profile = mt::make_chain({1}, {2});
  const mplan::Plan slack = mt::chain_plan(profile, {0}, {0}, mt::small_platform(1), 5.0);
  ASSERT_TRUE(mplan::validate(slack).empty());
  EXPECT_NEAR(mplan::simulate(slack, options).steady_period_ms, 3.0, 1e-9);
  options.policy = mplan::StartPolicy::Timetable;
  EXPECT_NEAR(mplan::simulate(slack, options).steady_period_ms, 5.0, 1e-9);
}

TEST(Simulate, PeakMemoryMatchesTheSteadyStateModel) {
  for (const mplan::Plan& plan : valid_plans()) {
    mplan::SimOptions options;
    options.micro_batches = 40 * plan.pattern.k;
    const mplan::SimResult sim = mplan::simulate(plan, options);
    EXPECT_EQ(sim.peak_memory_bytes,
              ms::totals(ms::evaluate_memory(plan.stages, plan.pattern, plan.platform)))
        << describe(plan);
    EXPECT_EQ(sim.peak_memory_bytes, plan.predicted.memory_bytes) << describe(plan);
  }
  // Sanity: the 1F1B plan keeps 4, 3, 2, 1 micro-batches on its stages.
  const mplan::Plan plan = one_f_one_b_plan();
  const mplan::SimResult sim = mplan::simulate(plan);
  for (int g = 0; g < 4; ++g) {
    const std::int64_t base = ms::static_memory(plan.stages, g, plan.platform).total();
    EXPECT_EQ(sim.peak_memory_bytes[g] - base, (4 - g) * plan.stages[g].stored_bytes) << g;
  }
}

TEST(Simulate, ShortRunsNeedLessMemory) {
  // With a flush, two micro-batches never fill a 1F1B pipeline of four stages.
  const mplan::Plan plan = one_f_one_b_plan();
  mplan::SimOptions options;
  options.micro_batches = 2;
  const mplan::SimResult sim = mplan::simulate(plan, options);
  const std::int64_t base = ms::static_memory(plan.stages, 0, plan.platform).total();
  EXPECT_EQ(sim.peak_memory_bytes[0], base + 2 * plan.stages[0].stored_bytes);
}

TEST(Simulate, MemoryTimelineStartsAndEndsAtStaticMemory) {
  const mplan::Plan plan = mt::pipelined_plan();
  const mplan::SimResult sim = mplan::simulate(plan);
  ASSERT_EQ(sim.memory.size(), 2u);
  ASSERT_EQ(sim.peak_memory_bytes.size(), 2u);
  for (int g = 0; g < 2; ++g) {
    const std::int64_t base = ms::static_memory(plan.stages, g, plan.platform).total();
    const auto& timeline = sim.memory[g];
    ASSERT_FALSE(timeline.empty());
    EXPECT_EQ(timeline.front().time_ms, 0.0);
    EXPECT_EQ(timeline.back().bytes, base);
    std::int64_t peak = 0;
    for (std::size_t i = 0; i < timeline.size(); ++i) {
      if (i > 0) {
        EXPECT_LT(timeline[i - 1].time_ms, timeline[i].time_ms);
      }
      EXPECT_GE(timeline[i].bytes, base);
      peak = std::max(peak, timeline[i].bytes);
    }
    EXPECT_EQ(peak, sim.peak_memory_bytes[g]);
  }
  // GPU 0 holds micro-batch 0 alone until F0 of micro-batch 1 starts at 4.
  const std::int64_t base0 = ms::static_memory(plan.stages, 0, plan.platform).total();
  EXPECT_EQ(sim.memory[0].front().bytes, base0 + 300);
  EXPECT_EQ(sim.memory[0][1].time_ms, 4.0);
  EXPECT_EQ(sim.memory[0][1].bytes, base0 + 600);
}

TEST(Simulate, DefaultNumberOfMicroBatches) {
  EXPECT_EQ(mplan::simulate(mt::pipelined_plan()).micro_batches, 8);  // 4 * 2
  EXPECT_EQ(mplan::simulate(interleaved_plan()).micro_batches, 12);   // 4 * 3
  EXPECT_EQ(mplan::simulate(mt::repeated(mt::pipelined_plan(), 3)).micro_batches,
            9);  // 8 -> multiple of 3
  const auto profile = mt::make_chain({1}, {2});
  const mplan::Plan single = mt::chain_plan(profile, {0}, {0}, mt::small_platform(1), 0);
  EXPECT_EQ(mplan::simulate(mt::repeated(single, 4)).micro_batches, 8);  // at least 2k
  EXPECT_EQ(mplan::simulate(single).micro_batches, 4);
}

TEST(Simulate, IsDeterministic) {
  const mplan::Plan plan = mt::repeated(one_f_one_b_plan(), 2);
  const mplan::SimResult a = mplan::simulate(plan);
  const mplan::SimResult b = mplan::simulate(plan);
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(a.ops[i].kind, b.ops[i].kind);
    EXPECT_EQ(a.ops[i].stage, b.ops[i].stage);
    EXPECT_EQ(a.ops[i].micro_batch, b.ops[i].micro_batch);
    EXPECT_EQ(a.ops[i].start_ms, b.ops[i].start_ms);
  }
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
}

TEST(Simulate, DetectsDeadlock) {
  // Two stages on one GPU; the pattern runs B1 of a micro-batch before its F1 on that GPU:
  // F0 at 0, B1 at 1, B0 at 2, F1 at 3, all for the same micro-batch.
  const auto profile = mt::make_chain({1, 1}, {1, 1});
  mplan::Plan plan = mt::chain_plan(profile, {0, 1}, {0, 0}, mt::small_platform(1), 4.0);
  const double starts[][3] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 2}, {0, 1, 3}};  // kind F=0/B=1, stage
  plan.pattern.ops.clear();
  for (const auto& s : starts) {
    ms::Op op;
    op.kind = s[0] == 0 ? OpKind::F : OpKind::B;
    op.stage = static_cast<int>(s[1]);
    op.gpu = 0;
    op.start_ms = s[2];
    op.duration_ms = 1;
    plan.pattern.ops.push_back(op);
  }
  EXPECT_FALSE(mplan::validate(plan).empty());
  try {
    mplan::simulate(plan);
    FAIL() << "expected a deadlock";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), "/pattern");
    EXPECT_NE(e.problem().find("pattern deadlocks: "), std::string::npos) << e.problem();
    EXPECT_NE(e.problem().find("gpu 0 waits to run B1.0, which needs F1.0"), std::string::npos)
        << e.problem();
  }
}

TEST(Simulate, DetectsDeadlockAcrossGpus) {
  // GPU 1 is told to run B1 of each micro-batch before its F1.
  mplan::Plan plan = mt::pipelined_plan();
  ms::Op& f1 = plan.pattern.ops[mt::find_op(plan, OpKind::F, 1)];
  ms::Op& b1 = plan.pattern.ops[mt::find_op(plan, OpKind::B, 1)];
  b1.start_ms = 0.5;
  b1.shift = f1.shift + 1;  // B1(i) one period before F1(i)
  try {
    mplan::simulate(plan);
    FAIL() << "expected a deadlock";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(e.problem().find("pattern deadlocks"), std::string::npos) << e.problem();
    EXPECT_NE(e.problem().find("which needs F1."), std::string::npos) << e.problem();
  }
}

TEST(Simulate, RejectsIncompletePatterns) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.pattern.ops.erase(plan.pattern.ops.begin() +
                         static_cast<long>(mt::find_op(plan, OpKind::B, 1)));
  try {
    mplan::simulate(plan);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), "/pattern");
    EXPECT_NE(e.problem().find("no B1 op"), std::string::npos) << e.problem();
  }
  plan = mt::repeated(mt::pipelined_plan(), 2);
  plan.pattern.ops[1].shift += 1;  // both copies of one op now run the same residue
  EXPECT_THROW(mplan::simulate(plan), madpipe::Error);

  plan = mt::pipelined_plan();
  plan.pattern.k = 1'000'000'000;
  try {
    mplan::simulate(plan);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.field(), "/pattern/k");
  }

  mplan::SimOptions options;
  options.micro_batches = -1;
  EXPECT_THROW(mplan::simulate(mt::pipelined_plan(), options), madpipe::Error);
}

TEST(Simulate, RandomSequentialPlans) {
  // Random chains cut into random stages on random GPUs (neighbours may share a GPU, a GPU may
  // hold several stages), one micro-batch at a time, written with k = 1..3.
  std::mt19937 rng(20240607);
  for (int trial = 0; trial < 40; ++trial) {
    const int layers = 2 + static_cast<int>(rng() % 7);
    const madpipe::Profile profile = mt::random_chain(rng, layers);
    const int num_stages = 1 + static_cast<int>(rng() % layers);
    const int gpus = 1 + static_cast<int>(rng() % 4);
    std::vector<int> cuts(layers - 1);
    for (int l = 0; l < layers - 1; ++l) cuts[l] = l + 1;
    std::shuffle(cuts.begin(), cuts.end(), rng);
    std::vector<int> first_layers(cuts.begin(), cuts.begin() + (num_stages - 1));
    first_layers.push_back(0);
    std::sort(first_layers.begin(), first_layers.end());
    std::vector<int> stage_gpus;
    for (int st = 0; st < num_stages; ++st) stage_gpus.push_back(static_cast<int>(rng() % gpus));
    madpipe::Platform platform = mt::small_platform(gpus);
    platform.memory_bytes = 1'000'000'000'000;
    platform.bandwidth_bytes_per_ms = 1e6 * (1 + rng() % 100);
    const mplan::Plan base = mt::chain_plan(profile, first_layers, stage_gpus, platform, 0);
    const mplan::Plan plan = mt::repeated(base, 1 + static_cast<int>(rng() % 3));
    SCOPED_TRACE(describe(plan) + ", trial " + std::to_string(trial));
    const auto violations = mplan::validate(plan, profile);
    ASSERT_TRUE(violations.empty())
        << violations.front().field << ": " << violations.front().problem;
    mplan::SimOptions options;
    options.micro_batches = 12 * plan.pattern.k;
    const mplan::SimResult sim = mplan::simulate(plan, options);
    EXPECT_NEAR(sim.steady_period_ms, plan.pattern.period_ms, 1e-9 * plan.pattern.period_ms);
    EXPECT_EQ(sim.peak_memory_bytes, plan.predicted.memory_bytes);
    options.policy = mplan::StartPolicy::Asap;
    EXPECT_LE(mplan::simulate(plan, options).steady_period_ms, plan.pattern.period_ms * (1 + 1e-9));
  }
}
