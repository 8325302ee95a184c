#include "plan/validate.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mremat = madpipe::remat;
namespace mt = madpipe::testing;
using mplan::Violation;
using ms::OpKind;

namespace {

// Three stages, the first two on GPU 0, run one micro-batch at a time.
madpipe::Profile three_layer_profile() {
  return mt::make_chain({1, 2, 3}, {2, 3, 4}, {10, 20, 30}, {100, 200, 300}, 50);
}
mplan::Plan sequential_plan() {
  return mt::chain_plan(three_layer_profile(), {0, 1, 2}, {0, 0, 1}, mt::small_platform(2), 0);
}

// 1F1B on four GPUs with free transfers: period 3 = f + b.
mplan::Plan one_f_one_b_plan() {
  const auto profile = mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {5, 5, 5, 5}, {0, 0, 0, 0}, 0);
  return mt::chain_plan(profile, {0, 1, 2, 3}, {0, 1, 2, 3}, mt::small_platform(4), 3.0);
}

std::string op_ptr(std::size_t i) { return "/pattern/ops/" + std::to_string(i); }

std::string dump(const std::vector<Violation>& violations) {
  std::ostringstream out;
  for (const Violation& v : violations) out << "\n  " << v.field << ": " << v.problem;
  return out.str();
}

bool has(const std::vector<Violation>& violations, const std::string& field,
         const std::string& text = "") {
  for (const Violation& v : violations)
    if (v.field == field && v.problem.find(text) != std::string::npos) return true;
  return false;
}

// Exactly one violation, at `field`, mentioning `text`.
void expect_only(const std::vector<Violation>& violations, const std::string& field,
                 const std::string& text) {
  EXPECT_EQ(violations.size(), 1u) << dump(violations);
  EXPECT_TRUE(has(violations, field, text))
      << "want " << field << " '" << text << "'" << dump(violations);
}

void expect_has(const std::vector<Violation>& violations, const std::string& field,
                const std::string& text) {
  EXPECT_TRUE(has(violations, field, text))
      << "want " << field << " '" << text << "'" << dump(violations);
}

bool any_problem_contains(const std::vector<Violation>& violations, const std::string& a,
                          const std::string& b) {
  for (const Violation& v : violations)
    if (v.problem.find(a) != std::string::npos && v.problem.find(b) != std::string::npos)
      return true;
  return false;
}

}  // namespace

TEST(PlanValidate, AcceptsHandMadeValidPlans) {
  const mplan::Plan plans[] = {mt::pipelined_plan(), sequential_plan(), one_f_one_b_plan(),
                               mt::repeated(mt::pipelined_plan(), 2),
                               mt::repeated(one_f_one_b_plan(), 2)};
  for (const mplan::Plan& plan : plans) {
    const auto violations = mplan::validate(plan);
    EXPECT_TRUE(violations.empty()) << "k=" << plan.pattern.k << dump(violations);
    EXPECT_NO_THROW(mplan::throw_if_invalid(violations));
  }
}

TEST(PlanValidate, AcceptsPlansMatchingTheirProfile) {
  EXPECT_TRUE(mplan::validate(mt::pipelined_plan(), mt::two_layer_profile()).empty());
  EXPECT_TRUE(mplan::validate(sequential_plan(), three_layer_profile()).empty());
}

TEST(PlanValidate, HandMadePatternsAreWhatTheTestsAssume) {
  const mplan::Plan plan = mt::pipelined_plan();
  EXPECT_EQ(plan.pattern.ops.size(), 6u);
  EXPECT_EQ(ms::concurrent_activations(plan.pattern, 2), (std::vector<int>{2, 1}));
  EXPECT_EQ(plan.predicted.memory_bytes, (std::vector<std::int64_t>{1900, 2100}));
  EXPECT_EQ(ms::concurrent_activations(one_f_one_b_plan().pattern, 4),
            (std::vector<int>{4, 3, 2, 1}));
}

// --- pattern: overlaps

TEST(PlanValidate, RejectsTwoTransfersOverlappingOnOneLink) {
  mplan::Plan plan = mt::pipelined_plan();
  // SEND_ACT0 runs in [1, 1.5); put SEND_GRAD0 at [1.2, 1.7).
  plan.pattern.ops[mt::find_op(plan, OpKind::SendGrad, 0)].start_ms = 1.2;
  const auto violations = mplan::validate(plan);
  EXPECT_TRUE(any_problem_contains(violations, "overlaps", "link [0, 1]")) << dump(violations);
}

TEST(PlanValidate, RejectsTwoOpsOverlappingOnOneGpu) {
  mplan::Plan plan = mt::pipelined_plan();
  // F0 runs in [0, 1); put B0 at [0.5, 2.5).
  plan.pattern.ops[mt::find_op(plan, OpKind::B, 0)].start_ms = 0.5;
  const auto violations = mplan::validate(plan);
  EXPECT_TRUE(any_problem_contains(violations, "overlaps", "gpu 0")) << dump(violations);
}

TEST(PlanValidate, RejectsOverlapWrappingPastThePeriodEnd) {
  // One stage: F [0, 1), B [1, 3), period 3. Moving B to 2.5 makes it run [2.5, 3) and
  // [0, 0.5) of the next period, over F.
  const auto profile = mt::make_chain({1}, {2});
  mplan::Plan plan = mt::chain_plan(profile, {0}, {0}, mt::small_platform(1), 0);
  ASSERT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
  const std::size_t b = mt::find_op(plan, OpKind::B, 0);
  plan.pattern.ops[b].start_ms = 2.5;
  const auto violations = mplan::validate(plan);
  EXPECT_EQ(violations.size(), 1u) << dump(violations);
  EXPECT_TRUE(any_problem_contains(violations, "overlaps", "gpu 0")) << dump(violations);
  // With a longer period the same start is fine.
  plan.pattern.period_ms = 4.5;
  mplan::fill_predicted(plan, 1.0);
  EXPECT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
}

TEST(PlanValidate, BackToBackOpsDoNotOverlap) {
  // B1 ends at 4.5 = 0.5 mod 4 while SEND_GRAD0 starts at 0.5 on another resource, and F0 [0,1)
  // is followed by B0 [1,3) on GPU 0: touching intervals are fine.
  EXPECT_TRUE(mplan::validate(mt::pipelined_plan()).empty());
}

// --- pattern: dependencies

TEST(PlanValidate, RejectsForwardBeforeItsInputArrives) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t f1 = mt::find_op(plan, OpKind::F, 1);
  plan.pattern.ops[f1].start_ms = 1.2;  // SEND_ACT0 ends at 1.5
  expect_only(mplan::validate(plan), op_ptr(f1) + "/start_ms",
              "F1.1 starts at 1.2 before SEND_ACT0.1, which it depends on, ends at 1.5");
}

TEST(PlanValidate, RejectsBackwardBeforeItsGradientArrives) {
  mplan::Plan plan = sequential_plan();
  const std::size_t b0 = mt::find_op(plan, OpKind::B, 0);
  const std::size_t b1 = mt::find_op(plan, OpKind::B, 1);
  // B0 and B1 share GPU 0 and follow each other; swap their order.
  std::swap(plan.pattern.ops[b0].start_ms, plan.pattern.ops[b1].start_ms);
  plan.pattern.ops[b0].start_ms = plan.pattern.ops[b1].start_ms - 2.0;
  const auto violations = mplan::validate(plan);
  expect_has(violations, op_ptr(b0) + "/start_ms", "B0.0");
}

TEST(PlanValidate, FollowsDependenciesAcrossPeriods) {
  // Shifting an op by one period and one micro-batch is the same schedule.
  mplan::Plan plan = mt::pipelined_plan();
  for (ms::Op& op : plan.pattern.ops) op.shift += 3;
  EXPECT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
  // Giving F1 the shift of the next micro-batch breaks it: F1 of micro-batch 0 would run one
  // period before its input.
  plan.pattern.ops[mt::find_op(plan, OpKind::F, 1)].shift += 1;
  expect_has(mplan::validate(plan), op_ptr(mt::find_op(plan, OpKind::F, 1)) + "/start_ms",
             "before");
}

// --- pattern: op sets

TEST(PlanValidate, RejectsMissingBackward) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.pattern.ops.erase(plan.pattern.ops.begin() +
                         static_cast<long>(mt::find_op(plan, OpKind::B, 1)));
  expect_only(mplan::validate(plan), "/pattern/ops", "missing B1");
}

TEST(PlanValidate, RejectsDuplicateForward) {
  mplan::Plan plan = mt::pipelined_plan();
  ms::Op extra = plan.pattern.ops[mt::find_op(plan, OpKind::F, 0)];
  extra.start_ms = 3.0;  // GPU 0 is idle in [3, 4)
  extra.shift += 1;
  plan.pattern.ops.push_back(extra);
  expect_only(mplan::validate(plan), op_ptr(plan.pattern.ops.size() - 1) + "/shift",
              "F0 already runs");
}

TEST(PlanValidate, RejectsShiftsNotCoveringResiduesForK2) {
  mplan::Plan plan = mt::repeated(mt::pipelined_plan(), 2);
  ASSERT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
  const std::size_t first = mt::find_op(plan, OpKind::F, 0, 0);
  const std::size_t second = mt::find_op(plan, OpKind::F, 0, 1);
  plan.pattern.ops[second].shift = plan.pattern.ops[first].shift + 2;  // same residue mod 2
  const int missing = (plan.pattern.ops[first].shift % 2 + 3) % 2;
  const auto violations = mplan::validate(plan);
  expect_has(violations, op_ptr(second) + "/shift", "F0 already runs micro-batches i with i mod 2");
  expect_has(violations, "/pattern/ops",
             "missing F0 for micro-batches i with i mod 2 = " + std::to_string(missing));
}

TEST(PlanValidate, RejectsHugeKWithoutListingEveryResidue) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.pattern.k = 1'000'000'000;
  plan.pattern.period_ms *= plan.pattern.k;
  mplan::fill_predicted(plan, 1.0);
  const auto violations = mplan::validate(plan);
  expect_has(violations, "/pattern/ops", "missing F0 for 999999999 of the 1000000000 residues");
  EXPECT_LT(violations.size(), 10u) << dump(violations);
}

TEST(PlanValidate, AcceptsK2WithShiftsSwapped) {
  // Listing the two copies in the other order changes nothing.
  mplan::Plan plan = mt::repeated(mt::pipelined_plan(), 2);
  std::reverse(plan.pattern.ops.begin(), plan.pattern.ops.end());
  EXPECT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
}

TEST(PlanValidate, RejectsWrongGpu) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t f0 = mt::find_op(plan, OpKind::F, 0);
  plan.pattern.ops[f0].gpu = 1;
  expect_only(mplan::validate(plan), op_ptr(f0) + "/gpu", "must be the gpu of stage 0 (0), got 1");
}

TEST(PlanValidate, RejectsWrongLink) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t send = mt::find_op(plan, OpKind::SendAct, 0);
  plan.pattern.ops[send].link = {1, 1};
  expect_only(mplan::validate(plan), op_ptr(send) + "/link", "must be [0, 1]");
}

TEST(PlanValidate, RejectsMissingTransfer) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.pattern.ops.erase(plan.pattern.ops.begin() +
                         static_cast<long>(mt::find_op(plan, OpKind::SendAct, 0)));
  expect_only(mplan::validate(plan), "/pattern/ops", "missing SEND_ACT0");
}

TEST(PlanValidate, RejectsTransferBetweenStagesOnOneGpu) {
  mplan::Plan plan = sequential_plan();
  ms::Op send;
  send.kind = OpKind::SendAct;
  send.stage = 0;  // stage 1 is on the same GPU
  send.link = {0, 0};
  plan.pattern.ops.push_back(send);
  expect_only(mplan::validate(plan), op_ptr(plan.pattern.ops.size() - 1) + "/kind",
              "SEND_ACT is not allowed for stage 0 (the next stage is on the same gpu)");

  plan = sequential_plan();
  send.kind = OpKind::SendGrad;
  send.stage = 2;
  send.link = {0, 1};
  plan.pattern.ops.push_back(send);
  expect_only(mplan::validate(plan), op_ptr(plan.pattern.ops.size() - 1) + "/kind",
              "(the last stage)");
}

TEST(PlanValidate, RejectsUnknownStage) {
  mplan::Plan plan = mt::pipelined_plan();
  ms::Op op = plan.pattern.ops[0];
  op.stage = 7;
  plan.pattern.ops.push_back(op);
  expect_only(mplan::validate(plan), op_ptr(plan.pattern.ops.size() - 1) + "/stage",
              "must name a stage in [0, 2), got 7");
}

// --- pattern: times

TEST(PlanValidate, RejectsWrongDurations) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t grad = mt::find_op(plan, OpKind::SendGrad, 0);
  plan.pattern.ops[grad].duration_ms = 0.4;
  expect_only(mplan::validate(plan), op_ptr(grad) + "/duration_ms",
              "must equal output_bytes / bandwidth_bytes_per_ms of stage 0 (0.5), got 0.4");

  plan = mt::pipelined_plan();
  const std::size_t f0 = mt::find_op(plan, OpKind::F, 0);
  plan.pattern.ops[f0].duration_ms = 0.5;
  expect_only(mplan::validate(plan), op_ptr(f0) + "/duration_ms",
              "must equal forward_ms of stage 0 (1), got 0.5");

  plan = mt::pipelined_plan();
  const std::size_t b1 = mt::find_op(plan, OpKind::B, 1);
  plan.pattern.ops[b1].duration_ms = 2.0 * (1 - 1e-8);  // within tolerance
  EXPECT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
}

TEST(PlanValidate, RejectsStartOutsideThePeriod) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t grad = mt::find_op(plan, OpKind::SendGrad, 0);
  plan.pattern.ops[grad].start_ms = 4.0;
  expect_has(mplan::validate(plan), op_ptr(grad) + "/start_ms",
             "must lie in [0, period_ms) = [0, 4)");
  plan.pattern.ops[grad].start_ms = -1.0;
  expect_has(mplan::validate(plan), op_ptr(grad) + "/start_ms", "got -1");
}

TEST(PlanValidate, RejectsDurationLongerThanThePeriod) {
  const auto profile = mt::make_chain({1}, {2});
  mplan::Plan plan = mt::chain_plan(profile, {0}, {0}, mt::small_platform(1), 0);
  const std::size_t b = mt::find_op(plan, OpKind::B, 0);
  plan.pattern.ops[b].duration_ms = 3.5;
  expect_has(mplan::validate(plan), op_ptr(b) + "/duration_ms",
             "must be <= period_ms (3), got 3.5");
}

// --- memory and predictions

TEST(PlanValidate, RejectsMemoryAboveTheLimit) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.platform.memory_bytes = 2000;  // GPU 1 needs 2100 in all
  expect_only(mplan::validate(plan), "/predicted/memory_bytes/1", "must not exceed the gpu memory");
}

TEST(PlanValidate, RejectsPredictedMemoryBelowTheRequirement) {
  mplan::Plan plan = mt::pipelined_plan();
  // GPU 0: 3 * 100 weights + 2 in-flight micro-batches * 300 stored bytes.
  plan.predicted.memory_bytes[0] = 900;
  EXPECT_TRUE(mplan::validate(plan).empty()) << dump(mplan::validate(plan));
  plan.predicted.memory_bytes[0] = 899;
  expect_only(mplan::validate(plan), "/predicted/memory_bytes/0",
              "must be at least what the pattern needs on gpu 0 (900: weights 300 + activations "
              "600), got 899");
}

TEST(PlanValidate, MemoryRequirementFollowsThePattern) {
  // Stretching B0 over more periods keeps more micro-batches in flight on stage 0: with the
  // shift of B0 one lower (one period later), three are in flight and 900 no longer suffices.
  mplan::Plan plan = mt::pipelined_plan();
  plan.predicted.memory_bytes[0] = 900;
  for (ms::Op& op : plan.pattern.ops)
    if (op.kind != OpKind::B || op.stage != 0) op.shift += 1;
  expect_only(mplan::validate(plan), "/predicted/memory_bytes/0",
              "(1200: weights 300 + activations 900)");
}

TEST(PlanValidate, RejectsOneMemoryEntryPerGpuMissing) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.predicted.memory_bytes.pop_back();
  expect_only(mplan::validate(plan), "/predicted/memory_bytes",
              "must have one entry per gpu (2), got 1");
}

TEST(PlanValidate, RejectsInconsistentPredictions) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.predicted.period_ms = 5.0;
  auto violations = mplan::validate(plan);
  expect_has(violations, "/predicted/period_ms", "must equal pattern period_ms / k (4), got 5");

  plan = mt::pipelined_plan();
  plan.predicted.throughput_per_s = 300;
  expect_only(mplan::validate(plan), "/predicted/throughput_per_s", "must equal 1000 / predicted");

  plan = mt::pipelined_plan();
  plan.predicted.lower_bound_period_ms = 4.0;
  EXPECT_TRUE(mplan::validate(plan).empty());
  plan.predicted.lower_bound_period_ms = 4.5;
  expect_only(mplan::validate(plan), "/predicted/lower_bound_period_ms",
              "must not exceed the predicted period_ms (4), got 4.5");

  plan = mt::repeated(mt::pipelined_plan(), 2);
  EXPECT_DOUBLE_EQ(plan.predicted.period_ms, 4.0);
  plan.predicted.period_ms = 8.0;
  expect_has(mplan::validate(plan), "/predicted/period_ms", "(4), got 8");
}

TEST(PlanValidate, RejectsUnknownSolverStatus) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.solver = mplan::SolverInfo{"cbc", "solved", 4, 4, 0, 1};
  expect_only(mplan::validate(plan), "/solver/status", "unknown solver status 'solved'");
  plan.solver->status = "timeout";
  EXPECT_TRUE(mplan::validate(plan).empty());
}

// --- format fields and stages

TEST(PlanValidate, RejectsBadPlatformAndPattern) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.platform.memory_bytes = 0;
  expect_has(mplan::validate(plan), "/platform/memory_bytes", "must be > 0, got 0");

  plan = mt::pipelined_plan();
  plan.platform.bandwidth_bytes_per_ms = 0;
  expect_has(mplan::validate(plan), "/platform/bandwidth_bytes_per_ms",
             "must be a finite number > 0");

  plan = mt::pipelined_plan();
  plan.platform.weight_copies = 0;
  expect_has(mplan::validate(plan), "/platform/weight_copies", "must be >= 1, got 0");

  plan = mt::pipelined_plan();
  plan.platform.gpus = 0;
  expect_has(mplan::validate(plan), "/platform/gpus", "must be >= 1, got 0");

  plan = mt::pipelined_plan();
  plan.pattern.period_ms = 0;
  expect_has(mplan::validate(plan), "/pattern/period_ms", "must be a finite number > 0, got 0");

  plan = mt::pipelined_plan();
  plan.pattern.k = 0;
  expect_has(mplan::validate(plan), "/pattern/k", "must be >= 1, got 0");
}

TEST(PlanValidate, RejectsStagesOutOfOrder) {
  mplan::Plan plan = sequential_plan();
  plan.stages[1].id = 2;
  expect_only(mplan::validate(plan), "/stages/1/id", "must be 1");

  plan = sequential_plan();
  plan.stages[0].first_layer = 1;
  auto violations = mplan::validate(plan);
  expect_has(violations, "/stages/0/first_layer", "the first stage must start at layer 0");

  plan = sequential_plan();
  plan.stages[2].first_layer = 1;
  violations = mplan::validate(plan);
  expect_has(violations, "/stages/2/first_layer",
             "must be 2 (the layer after the last layer of stage 1)");

  plan = sequential_plan();
  plan.stages[2].first_layer = 3;
  plan.stages[2].last_layer = 2;
  violations = mplan::validate(plan);
  expect_has(violations, "/stages/2/last_layer", "must be >= first_layer (3), got 2");

  plan = sequential_plan();
  plan.stages.clear();
  expect_has(mplan::validate(plan), "/stages", "must list at least one stage");
}

TEST(PlanValidate, RejectsStageGpuOutOfRange) {
  mplan::Plan plan = mt::pipelined_plan();
  plan.stages[1].gpu = 2;
  expect_has(mplan::validate(plan), "/stages/1/gpu", "must be in [0, 2), got 2");
}

TEST(PlanValidate, ChecksStageCostsAgainstTheProfile) {
  const auto profile = mt::two_layer_profile();
  mplan::Plan plan = mt::pipelined_plan();
  plan.stages[1].weight_bytes = 201;
  expect_has(mplan::validate(plan, profile), "/stages/1/weight_bytes",
             "must equal the sum of layers 1..1 in the profile (200), got 201");
  EXPECT_FALSE(has(mplan::validate(plan), "/stages/1/weight_bytes"));

  plan = mt::pipelined_plan();
  plan.stages[0].forward_ms = 1.5;
  expect_has(mplan::validate(plan, profile), "/stages/0/forward_ms", "(1), got 1.5");

  plan = mt::pipelined_plan();
  plan.stages[0].backward_ms = 2.0 * (1 + 1e-9);
  EXPECT_TRUE(mplan::validate(plan, profile).empty());

  plan = mt::pipelined_plan();
  plan.stages[0].output_bytes = 400;
  expect_has(mplan::validate(plan, profile), "/stages/0/output_bytes", "(500), got 400");
}

TEST(PlanValidate, RematStagesAreCheckedAgainstTheReplayOfTheirSequence) {
  const auto profile = mt::two_layer_profile();
  mplan::Plan plan = mt::pipelined_plan();
  const mremat::RematChain chain = mremat::stage_remat_chain(profile, 0, 0);
  const std::string text = "F0ck Loss dLoss F0all B0";
  const mremat::SequenceReplay replay =
      mremat::replay_sequence(chain, mremat::parse_remat_sequence(text, chain));
  ASSERT_TRUE(replay.valid);
  ms::Stage& stage = plan.stages[0];
  stage.stored_bytes = 100;
  expect_only(mplan::validate(plan, profile), "/stages/0/stored_bytes",
              "must equal inputs plus saved bytes of layers 0..0 in the profile (300), got 100");
  stage.remat = ms::RematStrategy::Rotor;
  expect_has(mplan::validate(plan, profile), "/stages/0/sequence",
             "is required when remat or offload is not \"none\"");
  stage.sequence = text;
  stage.stored_bytes = replay.stored_bytes;
  stage.backward_ms = replay.backward_ms;
  stage.workspace_bytes = replay.transient_bytes();
  plan.pattern.ops[mt::find_op(plan, OpKind::B, 0)].duration_ms = replay.backward_ms;
  mplan::fill_predicted(plan, 2.0);
  EXPECT_TRUE(mplan::validate(plan, profile).empty()) << dump(mplan::validate(plan, profile));

  mplan::Plan changed = plan;
  changed.stages[0].stored_bytes += 1;
  expect_has(mplan::validate(changed, profile), "/stages/0/stored_bytes",
             "must equal the replay of the sequence");
  changed = plan;
  changed.stages[0].workspace_bytes = replay.transient_bytes() - 1;
  expect_has(mplan::validate(changed, profile), "/stages/0/workspace_bytes",
             "must cover the sequence's transient memory");
  changed = plan;
  changed.stages[0].sequence = "F0ck Loss dLoss B0";
  expect_has(mplan::validate(changed, profile), "/stages/0/sequence", "not recorded");
  changed = plan;
  changed.stages[0].sequence = "F1all";
  expect_has(mplan::validate(changed, profile), "/stages/0/sequence", "outside the stage's layers");
  changed = plan;  // a layer number beyond any int (found by the plan fuzzer)
  changed.stages[0].sequence = "F184467440737095516154all";
  expect_has(mplan::validate(changed, profile), "/stages/0/sequence", "outside the stage's layers");
  changed = plan;
  changed.stages[0].remat = ms::RematStrategy::None;
  expect_has(mplan::validate(changed, profile), "/stages/0/sequence", "must be absent");
  changed = plan;
  changed.stages[0].backward_ms = 1.5;  // faster than the layers themselves
  changed.pattern.ops[mt::find_op(changed, OpKind::B, 0)].duration_ms = 1.5;
  mplan::fill_predicted(changed, 2.0);
  expect_has(mplan::validate(changed, profile), "/stages/0/backward_ms",
             "must be at least the sum of layers 0..0 in the profile (2), got 1.5");
}

TEST(PlanValidate, RejectsPlansNotCoveringTheProfile) {
  // The plan covers layers 0..1 of a 3-layer profile.
  const auto profile = mt::make_chain({1, 1, 1}, {2, 2, 2}, {100, 200, 300}, {500, 10, 10}, 300);
  expect_only(mplan::validate(mt::pipelined_plan(), profile), "/stages/1/last_layer",
              "the last stage must end at the last layer of profile 'test-chain' (2), got 1");
}

// --- reporting

TEST(PlanValidate, ReportsEveryViolation) {
  mplan::Plan plan = mt::pipelined_plan();
  const std::size_t f0 = mt::find_op(plan, OpKind::F, 0);
  const std::size_t grad = mt::find_op(plan, OpKind::SendGrad, 0);
  plan.pattern.ops[f0].gpu = 1;
  plan.pattern.ops[grad].start_ms = 9.0;
  plan.platform.memory_bytes = 1000;
  plan.stages[1].id = 5;
  const auto violations = mplan::validate(plan);
  expect_has(violations, op_ptr(f0) + "/gpu", "must be the gpu of stage 0");
  expect_has(violations, op_ptr(grad) + "/start_ms", "must lie in [0, period_ms)");
  expect_has(violations, "/predicted/memory_bytes/0", "must not exceed");
  expect_has(violations, "/predicted/memory_bytes/1", "must not exceed");
  expect_has(violations, "/stages/1/id", "must be 1");
  for (const Violation& v : violations) {
    EXPECT_FALSE(v.problem.empty());
    EXPECT_NE(v.problem.back(), '.') << v.problem;
    EXPECT_EQ(v.field.rfind('/', 0), 0u) << v.field;
  }
}

TEST(PlanValidate, ThrowIfInvalid) {
  EXPECT_NO_THROW(mplan::throw_if_invalid({}, "plan.json"));
  const std::vector<Violation> violations = {{"/a", "first problem"}, {"/b/0", "second problem"}};
  try {
    mplan::throw_if_invalid(violations, "plan.json");
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.file(), "plan.json");
    EXPECT_EQ(e.field(), "/a");
    EXPECT_EQ(e.problem(), "invalid plan: 2 violations: /a: first problem; /b/0: second problem");
  }
  try {
    mplan::throw_if_invalid({{"/x", "only"}});
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.problem(), "invalid plan: 1 violation: /x: only");
  }
}
