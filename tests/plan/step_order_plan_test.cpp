// A plan's step order (Plan::step_order): its JSON, the validator's rules, the step it runs.

#include "core/error.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/simulate.hpp"
#include "plan/step.hpp"
#include "plan/validate.hpp"
#include "support/planner_support.hpp"
#include "support/schedule_support.hpp"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mp = madpipe::partition;
namespace mplan = madpipe::plan;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// Interleaved 1F1B on 2 GPUs (stages 0..3, stage s on GPU s mod 2), planned for 4 micro-batches.
mplan::Plan interleaved_plan(mp::Algorithm algorithm = mp::Algorithm::Interleaved) {
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.micro_batches_per_step = 4;
  const auto result =
      mp::make_plan(mt::zero_bubble_chunks(2, 1000), mt::huge_memory_platform(2), options);
  EXPECT_TRUE(result.feasible) << result.reason;
  return result.plan;
}

// The validator's problems for `field`, joined.
std::string problems_at(const mplan::Plan& plan, const std::string& field) {
  std::string text;
  for (const mplan::Violation& v : mplan::validate(plan))
    if (v.field == field) text += v.problem + "; ";
  return text;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(StepOrderPlan, IsWrittenAndReadBack) {
  const mplan::Plan plan = interleaved_plan();
  ASSERT_TRUE(plan.step_order.has_value());
  std::ostringstream text;
  mplan::write_plan(plan, text);
  EXPECT_TRUE(has(text.str(), "\"step_order\": {")) << text.str();
  EXPECT_TRUE(has(text.str(), "\"F0.0\", \"F0.1\", \"F2.0\", \"F2.1\""));
  const mplan::Plan read = mplan::plan_from_json(nlohmann::json::parse(text.str()));
  ASSERT_TRUE(read.step_order.has_value());
  EXPECT_EQ(*read.step_order, *plan.step_order);
  EXPECT_TRUE(mplan::validate(read).empty());
  // Plans of algorithms without a published order have none, and their JSON no such member.
  const mplan::Plan zb_h1 = interleaved_plan(mp::Algorithm::ZbH1);
  EXPECT_FALSE(zb_h1.step_order.has_value());
  EXPECT_FALSE(has(mplan::plan_to_json(zb_h1).dump(), "step_order"));
}

// Orders may list each link's transfers (the step ILP's); they are written, read back and
// checked.
TEST(StepOrderPlan, LinkOrdersAreWrittenReadAndChecked) {
  mp::PlannerOptions options;
  options.algorithm = mp::Algorithm::Interleaved;
  options.micro_batches_per_step = 2;
  const auto result =
      mp::make_plan(mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {}, {500, 500, 500, 500}),
                    mt::huge_memory_platform(2, 1000), options);
  ASSERT_TRUE(result.feasible && result.plan.step_order);
  mplan::Plan plan = result.plan;
  // The transfers in the order their inputs finish in the step as it runs now.
  ms::LinkOrder link;
  link.link = {0, 1};
  for (const mplan::SimOp& op : mplan::simulate_step(plan, 2).ops)
    if (ms::is_transfer(op.kind)) link.transfers.push_back({op.kind, op.stage, op.micro_batch});
  ASSERT_EQ(link.transfers.size(), 12u);  // 3 cuts, activation and gradient, 2 micro-batches
  plan.step_order->per_link = {link};
  EXPECT_TRUE(mplan::validate(plan).empty()) << mt::describe(mplan::validate(plan));
  std::ostringstream text;
  mplan::write_plan(plan, text);
  EXPECT_TRUE(has(text.str(), "{\"link\": [0, 1], \"order\": [\"SEND_ACT0.0\"")) << text.str();
  const mplan::Plan read = mplan::plan_from_json(nlohmann::json::parse(text.str()));
  EXPECT_EQ(*read.step_order, *plan.step_order);
  {  // a transfer missing from its link, one in a GPU's list
    mplan::Plan bad = plan;
    const ms::StepAction moved = bad.step_order->per_link[0].transfers.back();
    bad.step_order->per_link[0].transfers.pop_back();
    bad.step_order->per_gpu[0].push_back(moved);
    const std::string problems = mt::describe(mplan::validate(bad));
    EXPECT_TRUE(has(problems, ms::to_string(moved) + " is in no link's list")) << problems;
    EXPECT_TRUE(has(problems, "a gpu's list holds F, B and W only")) << problems;
  }
  {  // a link that does not exist
    mplan::Plan bad = plan;
    bad.step_order->per_link[0].link = {1, 1};
    EXPECT_TRUE(has(problems_at(bad, "/step_order/links/0/link"), "0 <= a < b < 2"));
  }
}

TEST(StepOrderPlan, ReadingNamesTheBadOp) {
  nlohmann::json j = mplan::plan_to_json(interleaved_plan());
  j["step_order"]["gpus"][1][3] = "F1.x";
  try {
    mplan::plan_from_json(j, "plan.json");
    FAIL() << "accepted";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.field(), "/step_order/gpus/1/3");
    EXPECT_TRUE(has(e.problem(), "'F1.x'")) << e.problem();
  }
  j["step_order"]["gpus"][1] = "F1.0";
  EXPECT_THROW(mplan::plan_from_json(j, "plan.json"), madpipe::Error);
}

TEST(StepOrderPlan, TheValidatorChecksEveryRule) {
  const mplan::Plan good = interleaved_plan();
  ASSERT_TRUE(mplan::validate(good).empty());
  {  // an op on another GPU's list
    mplan::Plan plan = good;
    plan.step_order->per_gpu[0][0].stage = 1;
    EXPECT_TRUE(has(problems_at(plan, "/step_order/gpus/0/0"), "F1.0 runs on gpu 1"));
    EXPECT_TRUE(has(problems_at(plan, "/step_order/gpus"), "F0.0 is in no gpu's list"));
  }
  {  // a missing op
    mplan::Plan plan = good;
    plan.step_order->per_gpu[1].pop_back();
    EXPECT_TRUE(has(problems_at(plan, "/step_order/gpus"), "B1.3 is in no gpu's list"));
  }
  {  // B before its F
    mplan::Plan plan = good;
    std::vector<ms::StepAction>& gpu0 = plan.step_order->per_gpu[0];
    std::swap(gpu0.front(), gpu0.back());  // B0.3 first, F0.0 last
    EXPECT_TRUE(has(mt::describe(mplan::validate(plan)), "B0.3 comes before F0.3"))
        << mt::describe(mplan::validate(plan));
  }
  {  // an order that deadlocks: GPU 0 first waits for F2.0, which needs F1.0, which needs F0.0
    mplan::Plan plan = good;
    std::vector<ms::StepAction>& gpu0 = plan.step_order->per_gpu[0];
    const auto f2 = std::find(gpu0.begin(), gpu0.end(), ms::StepAction{ms::OpKind::F, 2, 0});
    ASSERT_NE(f2, gpu0.end());
    std::rotate(gpu0.begin(), f2, f2 + 1);
    EXPECT_TRUE(has(problems_at(plan, "/step_order"), "gpu 0 waits to run F2.0"))
        << mt::describe(mplan::validate(plan));
  }
  {  // W on a stage whose backward is whole, a micro-batch beyond the step
    mplan::Plan plan = good;
    plan.step_order->per_gpu[0].push_back({ms::OpKind::W, 0, 0});
    plan.step_order->per_gpu[1].push_back({ms::OpKind::F, 1, 9});
    EXPECT_TRUE(has(mt::describe(mplan::validate(plan)), "does not split its backward"));
    EXPECT_TRUE(has(mt::describe(mplan::validate(plan)), "micro-batches 0..3"));
  }
  {  // the predicted step is of another number of micro-batches
    mplan::Plan plan = good;
    plan.step_order->micro_batches = 8;
    EXPECT_TRUE(has(problems_at(plan, "/step_order/micro_batches"), "must equal"));
  }
}

// The step in the order: simulate() and the runtime's program follow it; another number of
// micro-batches follows the pattern.
TEST(StepOrderPlan, TheStepAndTheProgramFollowTheOrder) {
  const mplan::Plan plan = interleaved_plan();
  const mplan::SimResult step = mplan::simulate_step(plan, 4);
  const mplan::Program program = mplan::lower(plan, 4);
  for (int g = 0; g < 2; ++g) {
    SCOPED_TRACE("gpu " + std::to_string(g));
    std::vector<ms::StepAction> ran, lowered;
    for (const mplan::SimOp& op : step.per_gpu[g])
      ran.push_back({op.kind, op.stage, op.micro_batch});
    for (const mplan::Instr& instr : program.per_gpu[g]) {
      if (instr.kind == mplan::InstrKind::Forward)
        lowered.push_back({ms::OpKind::F, instr.stage, instr.micro_batch});
      if (instr.kind == mplan::InstrKind::Backward)
        lowered.push_back({ms::OpKind::B, instr.stage, instr.micro_batch});
    }
    EXPECT_EQ(ran, plan.step_order->per_gpu[g]);
    EXPECT_EQ(lowered, plan.step_order->per_gpu[g]);
  }
  const mplan::SimResult other = mplan::simulate_step(plan, 6);
  EXPECT_EQ(other.micro_batches, 6);
  EXPECT_GT(other.step_ms, 0);
}
