// Multi-node platforms: the bandwidth of each link (intra- or inter-node) in transfer times,
// patterns, the simulator, the validator and the plan format (bad values: plan_io_test.cpp).

#include "core/error.hpp"
#include "core/platform.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/pattern.hpp"
#include "schedule/search.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using nlohmann::json;

namespace {

// `gpus` GPUs in nodes of `per_node`, 1000 B/ms inside a node and `inter` between nodes.
madpipe::Platform nodes_platform(int gpus, int per_node, double inter = 250) {
  madpipe::Platform platform = mt::make_platform(gpus, mt::kHugeMemory, 1000, 3);
  platform.gpus_per_node = per_node;
  platform.inter_node_bandwidth_bytes_per_ms = inter;
  return platform;
}

// Four layers (F 1, B 2), outputs of 1000 bytes: one stage per layer on GPUs 0..3 in two nodes
// of two, so boundary 1 -> 2 crosses nodes (4 ms per transfer) and the others do not (1 ms).
// two_node_plan() runs one micro-batch at a time.
const madpipe::Profile& four_layers() {
  static const madpipe::Profile profile =
      mt::make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {10, 10, 10, 10}, {1000, 1000, 1000, 4}, 1000);
  return profile;
}

mplan::Plan two_node_plan() {
  return mt::chain_plan(four_layers(), {0, 1, 2, 3}, {0, 1, 2, 3}, nodes_platform(4, 2), 0);
}

bool has_violation(const std::vector<mplan::Violation>& list, const std::string& field,
                   const std::string& problem_part) {
  for (const mplan::Violation& v : list)
    if (v.field == field && v.problem.find(problem_part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(LinkBandwidth, NodesOfGpus) {
  const madpipe::Platform platform = nodes_platform(6, 4);
  EXPECT_EQ(madpipe::num_nodes(platform), 2);  // the last node holds 2 GPUs
  EXPECT_EQ(madpipe::node_of(platform, 3), 0);
  EXPECT_EQ(madpipe::node_of(platform, 4), 1);
  madpipe::Platform one_node = platform;
  one_node.gpus_per_node = 0;
  EXPECT_EQ(madpipe::num_nodes(one_node), 1);
  EXPECT_EQ(madpipe::node_of(one_node, 5), 0);
}

TEST(LinkBandwidth, TransferTimePerLink) {
  const madpipe::Platform platform = nodes_platform(8, 4, 100);
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 0, 3), 1.0);   // inside node 0
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 7, 4), 1.0);   // inside node 1
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 3, 4), 10.0);  // between nodes
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 4, 3), 10.0);
  // Without GPUs: the slowest link.
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform), 10.0);
  EXPECT_DOUBLE_EQ(madpipe::slowest_link_bandwidth(platform), 100.0);
  EXPECT_DOUBLE_EQ(madpipe::fastest_link_bandwidth(platform), 1000.0);
  EXPECT_FALSE(madpipe::has_uniform_links(platform));
}

TEST(LinkBandwidth, UniformPlatformsKeepOneBandwidth) {
  madpipe::Platform platform =
      nodes_platform(8, 0, 100);  // one node: the inter-node bandwidth is unused
  EXPECT_TRUE(madpipe::has_uniform_links(platform));
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 3, 4), 1.0);
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform), 1.0);

  platform.gpus_per_node = 4;  // unset inter-node bandwidth: the same as inside a node
  platform.inter_node_bandwidth_bytes_per_ms = 0;
  EXPECT_TRUE(madpipe::has_uniform_links(platform));
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 3, 4), 1.0);

  platform.gpus_per_node = 8;  // one node holds every GPU
  platform.inter_node_bandwidth_bytes_per_ms = 100;
  EXPECT_TRUE(madpipe::has_uniform_links(platform));
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform), 1.0);

  platform.gpus_per_node = 1;  // every GPU alone on its node: every link is inter-node
  EXPECT_TRUE(madpipe::has_uniform_links(platform));
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 0, 1), 10.0);
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform), 10.0);

  platform.gpus_per_node = 4;  // a faster inter-node link: the intra-node one is the slowest
  platform.inter_node_bandwidth_bytes_per_ms = 4000;
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform), 1.0);
  EXPECT_DOUBLE_EQ(ms::transfer_ms(1000, platform, 0, 4), 0.25);
}

TEST(LinkBandwidth, MicroBatchChainTimesEachLink) {
  const mplan::Plan plan = two_node_plan();
  std::vector<double> act, grad;
  for (const ms::Op& op : ms::micro_batch_chain(plan.stages, plan.platform)) {
    if (op.kind == ms::OpKind::SendAct) act.push_back(op.duration_ms);
    if (op.kind == ms::OpKind::SendGrad) grad.push_back(op.duration_ms);
  }
  EXPECT_EQ(act, (std::vector<double>{1.0, 4.0, 1.0}));
  EXPECT_EQ(grad, (std::vector<double>{1.0, 4.0, 1.0}));  // from the last boundary back
}

// One micro-batch at a time: the period is the chain's length, 4 * (1 + 2) of compute plus
// 2 * (1 + 4 + 1) of transfers = 24 ms; the simulator measures it exactly.
TEST(LinkBandwidth, SimulatedPeriodOfSequentialTwoNodePlan) {
  const mplan::Plan plan = two_node_plan();
  EXPECT_DOUBLE_EQ(plan.pattern.period_ms, 24.0);
  EXPECT_EQ(mt::describe(mplan::validate(plan, four_layers())), "");
  const mplan::SimResult sim = mplan::simulate(plan);
  EXPECT_NEAR(sim.steady_normalized_ms, 24.0, 1e-9);
}

// Pipelined: the inter-node link carries 4 + 4 ms per micro-batch, more than any GPU (3 ms) or
// intra-node link (2 ms): the best pattern has period 8, and the simulator agrees.
TEST(LinkBandwidth, SimulatedPeriodIsTheInterNodeLinkLoad) {
  const mplan::Plan sequential = two_node_plan();
  EXPECT_DOUBLE_EQ(ms::busiest_resource_ms(sequential.stages, sequential.platform), 8.0);
  const auto scheduled = ms::schedule_under_memory(sequential.stages, sequential.platform);
  ASSERT_TRUE(scheduled.has_value());
  EXPECT_NEAR(scheduled->pattern.normalized_period_ms(), 8.0, 1e-9);
  const mplan::Plan plan = mt::plan_of(sequential.stages, sequential.platform, scheduled->pattern);
  EXPECT_EQ(mt::describe(mplan::validate(plan, four_layers())), "");
  const mplan::SimResult sim = mplan::simulate(plan);
  EXPECT_NEAR(sim.steady_normalized_ms, 8.0, 1e-9);

  // With every link inside one node, the GPUs (3 ms) are the bottleneck.
  madpipe::Platform one_node = sequential.platform;
  one_node.gpus_per_node = 0;
  const auto fast = ms::schedule_under_memory(sequential.stages, one_node);
  ASSERT_TRUE(fast.has_value());
  EXPECT_NEAR(fast->pattern.normalized_period_ms(), 3.0, 1e-9);
}

TEST(LinkBandwidth, ValidatorChecksEachLinksBandwidth) {
  mplan::Plan plan = two_node_plan();
  // Timed as if the inter-node link were as fast as the others.
  plan.pattern.ops[mt::find_op(plan, ms::OpKind::SendAct, 1)].duration_ms = 1.0;
  EXPECT_TRUE(has_violation(
      mplan::validate(plan),
      "/pattern/ops/" + std::to_string(mt::find_op(plan, ms::OpKind::SendAct, 1)) + "/duration_ms",
      "must equal output_bytes / inter_node_bandwidth_bytes_per_ms of stage 1 (4), got 1"));

  // The same plan read as a one-node platform: every transfer takes 1 ms.
  mplan::Plan one_node = two_node_plan();
  one_node.platform.gpus_per_node = 0;
  EXPECT_TRUE(has_violation(
      mplan::validate(one_node),
      "/pattern/ops/" + std::to_string(mt::find_op(one_node, ms::OpKind::SendAct, 1)) +
          "/duration_ms",
      "must equal output_bytes / bandwidth_bytes_per_ms of stage 1 (1), got 4"));
}

TEST(LinkBandwidth, ValidatorRejectsBadNodeFields) {
  mplan::Plan plan = two_node_plan();
  plan.platform.gpus_per_node = -1;
  EXPECT_TRUE(
      has_violation(mplan::validate(plan), "/platform/gpus_per_node", "must be >= 0, got -1"));
  plan = two_node_plan();
  plan.platform.inter_node_bandwidth_bytes_per_ms = -5;
  EXPECT_TRUE(has_violation(mplan::validate(plan), "/platform/inter_node_bandwidth_bytes_per_ms",
                            "must be a finite number >= 0, got -5"));
  plan.platform.inter_node_bandwidth_bytes_per_ms = std::nan("");
  EXPECT_TRUE(has_violation(mplan::validate(plan), "/platform/inter_node_bandwidth_bytes_per_ms",
                            "must be a finite number >= 0, got nan"));
}

TEST(LinkBandwidth, PlanJsonRoundTripWithNodeFields) {
  const mplan::Plan plan = two_node_plan();
  std::ostringstream out;
  mplan::write_plan(plan, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("\"gpus_per_node\": 2, \"inter_node_bandwidth_bytes_per_ms\": 250.0}"),
            std::string::npos)
      << text;
  const mplan::Plan back = mplan::plan_from_json(json::parse(text));
  EXPECT_EQ(back.platform, plan.platform);
  EXPECT_EQ(back.pattern, plan.pattern);
  EXPECT_EQ(mt::describe(mplan::validate(back)), "");

  // Unset fields are not written, and read back as unset.
  mplan::Plan one_node = mt::pipelined_plan();
  std::ostringstream plain;
  mplan::write_plan(one_node, plain);
  EXPECT_EQ(plain.str().find("gpus_per_node"), std::string::npos);
  EXPECT_EQ(plain.str().find("inter_node"), std::string::npos);
  const mplan::Plan plain_back = mplan::plan_from_json(json::parse(plain.str()));
  EXPECT_EQ(plain_back.platform.gpus_per_node, 0);
  EXPECT_EQ(plain_back.platform.inter_node_bandwidth_bytes_per_ms, 0.0);
}
