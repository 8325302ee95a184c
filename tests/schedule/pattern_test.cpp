#include "schedule/pattern.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "schedule/memory.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::Op;
using ms::OpKind;

namespace {

ms::Op make_op(OpKind kind, int stage, int gpu, double start, double duration, int shift) {
  Op op;
  op.kind = kind;
  op.stage = stage;
  op.gpu = gpu;
  op.start_ms = start;
  op.duration_ms = duration;
  op.shift = shift;
  return op;
}

const Op* find_op(const ms::Pattern& pattern, OpKind kind, int stage) {
  for (const Op& op : pattern.ops)
    if (op.kind == kind && op.stage == stage) return &op;
  return nullptr;
}

}  // namespace

TEST(PatternBasics, KindNamesRoundTrip) {
  for (OpKind kind : {OpKind::F, OpKind::B, OpKind::SendAct, OpKind::SendGrad})
    EXPECT_EQ(ms::op_kind_from_string(ms::to_string(kind)), kind);
  EXPECT_STREQ(ms::to_string(OpKind::SendAct), "SEND_ACT");
  EXPECT_STREQ(ms::to_string(OpKind::SendGrad), "SEND_GRAD");
  EXPECT_TRUE(ms::is_transfer(OpKind::SendAct));
  EXPECT_TRUE(ms::is_transfer(OpKind::SendGrad));
  EXPECT_FALSE(ms::is_transfer(OpKind::F));
  EXPECT_FALSE(ms::is_transfer(OpKind::B));
}

TEST(PatternBasics, UnknownKindListsValidNames) {
  try {
    ms::op_kind_from_string("FWD");
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    const std::string problem = e.problem();
    EXPECT_NE(problem.find("FWD"), std::string::npos);
    for (const char* name : {"F", "B", "SEND_ACT", "SEND_GRAD"})
      EXPECT_NE(problem.find(name), std::string::npos) << name;
  }
}

TEST(PatternBasics, OpTokens) {
  EXPECT_EQ(ms::op_token(OpKind::F, 2), "F2");
  EXPECT_EQ(ms::op_token(OpKind::B, 0), "B0");
  EXPECT_EQ(ms::op_token(OpKind::F, 2, 7), "F2.7");
  EXPECT_EQ(ms::op_token(OpKind::SendAct, 1, 3), "SEND_ACT1.3");
  EXPECT_EQ(ms::op_token(OpKind::SendGrad, 0, 12), "SEND_GRAD0.12");
}

TEST(PatternBasics, ResourceIds) {
  Op f = make_op(OpKind::F, 0, 3, 0, 1, 0);
  EXPECT_EQ(ms::resource_of(f, 4), 3);
  Op send = make_op(OpKind::SendAct, 0, -1, 0, 1, 0);
  send.link = {1, 2};
  EXPECT_EQ(ms::resource_of(send, 4), 4 + 1 * 4 + 2);
  send.link = {0, 3};
  EXPECT_EQ(ms::resource_of(send, 4), 4 + 3);
}

TEST(PatternBasics, MicroBatchChainAddsTransfersOnlyBetweenGpus) {
  // Stages 1 and 2 share GPU 1: no transfer between them.
  const auto profile = mt::make_chain({1, 2, 3}, {4, 5, 6}, {10, 20, 30}, {1000, 2000, 3000}, 500);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1, 2}, {0, 1, 1});
  const auto chain = ms::micro_batch_chain(stages, mt::small_platform(2, 100));
  std::vector<std::string> tokens;
  for (const Op& op : chain) tokens.push_back(ms::op_token(op.kind, op.stage));
  EXPECT_EQ(tokens, (std::vector<std::string>{"F0", "SEND_ACT0", "F1", "F2", "B2", "B1",
                                              "SEND_GRAD0", "B0"}));
  EXPECT_DOUBLE_EQ(chain[0].duration_ms, 1.0);
  EXPECT_EQ(chain[0].gpu, 0);
  EXPECT_DOUBLE_EQ(chain[1].duration_ms, 1000.0 / 100.0);
  EXPECT_EQ(chain[1].link, (ms::Link{0, 1}));
  EXPECT_DOUBLE_EQ(chain[4].duration_ms, 6.0);
  EXPECT_EQ(chain[4].gpu, 1);
  EXPECT_DOUBLE_EQ(chain[6].duration_ms, 10.0);
  EXPECT_EQ(chain[6].link, (ms::Link{0, 1}));
  for (const Op& op : chain) {
    EXPECT_EQ(op.start_ms, 0.0);
    EXPECT_EQ(op.shift, 0);
  }
}

TEST(PatternBasics, MicroBatchChainLinkIsOrdered) {
  const auto profile = mt::make_chain({1, 1}, {1, 1}, {}, {100, 100});
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1}, {2, 0});
  const auto chain = ms::micro_batch_chain(stages, mt::small_platform(3, 100));
  ASSERT_EQ(chain.size(), 6u);
  EXPECT_EQ(chain[1].kind, OpKind::SendAct);
  EXPECT_EQ(chain[1].link, (ms::Link{0, 2}));
  EXPECT_EQ(chain[4].kind, OpKind::SendGrad);
  EXPECT_EQ(chain[4].link, (ms::Link{0, 2}));
}

TEST(PatternBasics, SingleStageChain) {
  const auto profile = mt::make_chain({1, 2}, {3, 4});
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0}, {0});
  const auto chain = ms::micro_batch_chain(stages, mt::small_platform(1, 100));
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(chain[0].kind, OpKind::F);
  EXPECT_DOUBLE_EQ(chain[0].duration_ms, 3.0);
  EXPECT_EQ(chain[1].kind, OpKind::B);
  EXPECT_DOUBLE_EQ(chain[1].duration_ms, 7.0);
}

TEST(PatternBasics, NormalizeMovesStartsIntoThePeriod) {
  ms::Pattern pattern;
  pattern.period_ms = 10;
  pattern.k = 1;
  pattern.ops = {make_op(OpKind::F, 0, 0, 25, 1, 0), make_op(OpKind::B, 0, 0, -3, 1, 0)};
  ms::normalize(pattern);
  // F: 25 = 2*10 + 5 -> start 5, shift -2; B: -3 = -1*10 + 7 -> start 7, shift +1; then
  // every shift moves by -1 so that B0 has shift 0.
  EXPECT_DOUBLE_EQ(pattern.ops[0].start_ms, 5.0);
  EXPECT_EQ(pattern.ops[0].shift, -3);
  EXPECT_DOUBLE_EQ(pattern.ops[1].start_ms, 7.0);
  EXPECT_EQ(pattern.ops[1].shift, 0);
}

TEST(PatternBasics, NormalizeScalesShiftsByK) {
  ms::Pattern pattern;
  pattern.period_ms = 10;
  pattern.k = 2;
  pattern.ops = {make_op(OpKind::F, 0, 0, 25, 1, 1), make_op(OpKind::B, 0, 0, 3, 1, 0),
                 make_op(OpKind::B, 0, 0, 13, 1, 1)};
  ms::normalize(pattern);
  // F: 25 = 2*10 + 5 -> shift 1 - 2*2 = -3; second B: 13 = 10 + 3 -> shift 1 - 2 = -1; the
  // smallest shift of B0 is then -1, so every shift gains 1.
  EXPECT_DOUBLE_EQ(pattern.ops[0].start_ms, 5.0);
  EXPECT_EQ(pattern.ops[0].shift, -2);
  EXPECT_DOUBLE_EQ(pattern.ops[1].start_ms, 3.0);
  EXPECT_EQ(pattern.ops[1].shift, 1);
  EXPECT_DOUBLE_EQ(pattern.ops[2].start_ms, 3.0);
  EXPECT_EQ(pattern.ops[2].shift, 0);
  const ms::Pattern once = pattern;
  ms::normalize(pattern);  // idempotent
  EXPECT_EQ(pattern, once);
}

TEST(PatternBasics, PatternFromAbsoluteTimes) {
  // f = 1, b = 2 per stage, 0.5 ms transfers; micro-batch 0: F0 [0,1) SA [1,1.5) F1 [1.5,2.5)
  // B1 [2.5,4.5) SG [4.5,5) B0 [5,7).
  const auto profile = mt::two_layer_profile();
  const auto platform = mt::small_platform(2, 1000);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1}, {0, 1});
  const ms::Pattern pattern =
      ms::pattern_from_absolute_times(mt::asap_chain(stages, platform), 4.0);
  EXPECT_EQ(pattern.k, 1);
  EXPECT_DOUBLE_EQ(pattern.period_ms, 4.0);
  ASSERT_EQ(pattern.ops.size(), 6u);
  struct Expected {
    OpKind kind;
    int stage;
    double start;
    int shift;
  };
  const Expected expected[] = {{OpKind::F, 0, 0.0, 1},        {OpKind::SendAct, 0, 1.0, 1},
                               {OpKind::F, 1, 1.5, 1},        {OpKind::B, 1, 2.5, 1},
                               {OpKind::SendGrad, 0, 0.5, 0}, {OpKind::B, 0, 1.0, 0}};
  for (const Expected& e : expected) {
    const Op* op = find_op(pattern, e.kind, e.stage);
    ASSERT_NE(op, nullptr) << ms::op_token(e.kind, e.stage);
    EXPECT_DOUBLE_EQ(op->start_ms, e.start) << ms::op_token(e.kind, e.stage);
    EXPECT_EQ(op->shift, e.shift) << ms::op_token(e.kind, e.stage);
  }
  // Sorted by start time.
  for (std::size_t i = 1; i < pattern.ops.size(); ++i)
    EXPECT_LE(pattern.ops[i - 1].start_ms, pattern.ops[i].start_ms);
}

TEST(PatternBasics, SortOpsIsDeterministic) {
  ms::Pattern a;
  a.period_ms = 10;
  a.ops = {make_op(OpKind::B, 1, 1, 2, 1, 0), make_op(OpKind::F, 0, 0, 2, 1, 0),
           make_op(OpKind::F, 1, 1, 0, 1, 0)};
  ms::Pattern b = a;
  std::swap(b.ops[0], b.ops[2]);
  ms::sort_ops(a);
  ms::sort_ops(b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.ops[0].stage, 1);
  EXPECT_EQ(a.ops[0].kind, OpKind::F);
  EXPECT_EQ(a.ops[1].gpu, 0);
  EXPECT_EQ(a.ops[2].kind, OpKind::B);
}

TEST(PatternBasics, ConcurrentActivationsOfTwoStagePipeline) {
  // Two stages on two GPUs at period 4, the pattern of PatternFromAbsoluteTimes.
  const mplan::Plan plan = mt::pipelined_plan();
  const ms::Pattern& pattern = plan.pattern;
  // Stage 0 holds a micro-batch for 7 ms, stage 1 for 3 ms, one new micro-batch every 4 ms.
  EXPECT_EQ(ms::concurrent_activations(pattern, 2), (std::vector<int>{2, 1}));

  const auto memory = ms::evaluate_memory(plan.stages, pattern, plan.platform);
  ASSERT_EQ(memory.size(), 2u);
  // Stage 0: stored = input 300; stage 1: stored = a_0 = 500. Buffers: 2 * a_0 on both GPUs.
  EXPECT_EQ(memory[0].weights, 3 * 100);
  EXPECT_EQ(memory[0].activations, 2 * 300);
  EXPECT_EQ(memory[0].buffers, 2 * 500);
  EXPECT_EQ(memory[1].weights, 3 * 200);
  EXPECT_EQ(memory[1].activations, 500);
  EXPECT_EQ(memory[1].buffers, 2 * 500);
  EXPECT_EQ(memory[0].lower_bound(), 300 + 600);
  EXPECT_EQ(ms::totals(memory), (std::vector<std::int64_t>{1900, 2100}));
}

TEST(PatternBasics, ConcurrentActivationsOfOneFOneB) {
  // S stages with f = 1, b = 2 and free transfers: period 3, stage s keeps S - s micro-batches.
  const int num_stages = 4;
  const auto profile =
      mt::make_chain(std::vector<double>(num_stages, 1.0), std::vector<double>(num_stages, 2.0));
  const auto platform = mt::small_platform(num_stages, 1000);
  const auto stages = ms::make_stages(madpipe::ChainCosts(profile), {0, 1, 2, 3}, {0, 1, 2, 3});
  const ms::Pattern pattern =
      ms::pattern_from_absolute_times(mt::asap_chain(stages, platform), 3.0);
  EXPECT_EQ(ms::concurrent_activations(pattern, num_stages), (std::vector<int>{4, 3, 2, 1}));
}

TEST(PatternBasics, ConcurrentActivationsBackToBackCountsOnce) {
  // One stage: F [0,1), B [1,3), period 3: B ends exactly when the next F starts.
  ms::Pattern pattern;
  pattern.period_ms = 3;
  pattern.ops = {make_op(OpKind::F, 0, 0, 0, 1, 0), make_op(OpKind::B, 0, 0, 1, 2, 0)};
  EXPECT_EQ(ms::concurrent_activations(pattern, 1), (std::vector<int>{1}));
  // Same with k = 2 written out.
  ms::Pattern doubled;
  doubled.period_ms = 6;
  doubled.k = 2;
  doubled.ops = {make_op(OpKind::F, 0, 0, 0, 1, 0), make_op(OpKind::B, 0, 0, 1, 2, 0),
                 make_op(OpKind::F, 0, 0, 3, 1, 1), make_op(OpKind::B, 0, 0, 4, 2, 1)};
  EXPECT_EQ(ms::concurrent_activations(doubled, 1), (std::vector<int>{1}));
}

TEST(PatternBasics, ConcurrentActivationsAcrossPeriods) {
  // F at 0, B of the same micro-batch two periods later: three micro-batches in flight at F.
  ms::Pattern pattern;
  pattern.period_ms = 2;
  pattern.ops = {make_op(OpKind::F, 0, 0, 0, 1, 2), make_op(OpKind::B, 0, 0, 1, 0.5, 0)};
  // Micro-batch i: F in period i-2 at 2(i-2), B in period i at 2i+1, ends at 2i+1.5: span 5.5.
  EXPECT_EQ(ms::concurrent_activations(pattern, 1), (std::vector<int>{3}));
}
