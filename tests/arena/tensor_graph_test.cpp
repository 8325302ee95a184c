#include "arena/tensor_graph.hpp"

#include "arena/address_plan.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "remat/rotor.hpp"
#include "support/test_support.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace madpipe::arena {
namespace {

TEST(TensorGraph, ExplicitListGivesLifetimesInNodeOrder) {
  // The simple example graph of the arena tests: A->B (10), B->C (20), B->D (30), D->E (40).
  const TensorGraph graph = make_tensor_graph({"A", "B", "C", "D", "E"}, {{"AB", 10, "A", {"B"}},
                                                                          {"BC", 20, "B", {"C"}},
                                                                          {"BD", 30, "B", {"D"}},
                                                                          {"DE", 40, "D", {"E"}}});
  const std::vector<Buffer> buffers = buffers_of(graph);
  ASSERT_EQ(buffers.size(), 4u);
  EXPECT_EQ(buffers[2].name, "BD");
  EXPECT_EQ(buffers[2].first, 1);
  EXPECT_EQ(buffers[2].last, 3);
  EXPECT_EQ(live_bytes_lower_bound(buffers), 70);
}

TEST(TensorGraph, InputsLiveFromTheStartAndWorkspacesOnlyDuringTheirOp) {
  const TensorGraph graph =
      make_tensor_graph({"A", "B"}, {{"in", 5, "", {"B"}}, {"ws", 7, "A", {}}});
  const std::vector<Buffer> buffers = buffers_of(graph);
  EXPECT_EQ(buffers[0].first, 0);
  EXPECT_EQ(buffers[0].last, 1);
  EXPECT_EQ(buffers[1].first, 0);
  EXPECT_EQ(buffers[1].last, 0);
  EXPECT_EQ(live_bytes_lower_bound(buffers), 12);
}

TEST(TensorGraph, RejectsBadLists) {
  EXPECT_THROW(make_tensor_graph({"A"}, {{"t", 1, "X", {}}}), Error);
  EXPECT_THROW(make_tensor_graph({"A", "B"}, {{"t", 1, "B", {"A"}}}), Error);
  EXPECT_THROW(make_tensor_graph({"A", "B"}, {{"t", -1, "A", {"B"}}}), Error);
  EXPECT_THROW(make_tensor_graph({"A", "A"}, {}), Error);
}

// The lower bound of the unrolled stage is the planner's memory model: (N-1) * stored + peak.
void expect_matches_replay(const remat::RematChain& chain, const remat::RematSequence& sequence,
                           int in_flight) {
  const remat::SequenceReplay replay =
      replay_sequence(chain, sequence.empty() ? store_all_sequence(chain) : sequence);
  ASSERT_TRUE(replay.valid) << replay.problem;
  const TensorGraph graph = stage_tensor_graph(chain, sequence, in_flight);
  EXPECT_EQ(live_bytes_lower_bound(buffers_of(graph)),
            (in_flight - 1) * replay.stored_bytes + replay.peak_bytes);
  double total_ms = 0;
  for (const TensorNode& node : graph.nodes) total_ms += node.duration_ms;
  EXPECT_NEAR(total_ms, in_flight * replay.total_ms(), 1e-9);
}

TEST(TensorGraph, StageOfGpt2MatchesTheReplayForEveryInFlightCount) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 4);
  for (int in_flight : {1, 2, 3}) expect_matches_replay(chain, {}, in_flight);
  const TensorGraph graph = stage_tensor_graph(chain, {}, 2);
  EXPECT_EQ(graph.nodes.front().name, "recv@m0");
  EXPECT_EQ(graph.nodes[1].name, "F1all@m0");
  EXPECT_TRUE(std::any_of(graph.tensors.begin(), graph.tensors.end(),
                          [](const Tensor& t) { return t.name == "abar2@m1"; }));
}

TEST(TensorGraph, StageWithARematSequenceMatchesTheReplay) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 4, 12);
  const remat::SequenceReplay all = replay_sequence(chain, store_all_sequence(chain));
  const remat::RematResult remat = optimal_remat(chain, all.peak_bytes * 6 / 10, 200);
  ASSERT_TRUE(remat.feasible);
  ASSERT_NE(remat.sequence, store_all_sequence(chain));
  for (int in_flight : {1, 3}) expect_matches_replay(chain, remat.sequence, in_flight);
}

TEST(TensorGraph, MicroBatchGraphHasItsForwardPartFirst) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 4);
  const MicroBatchTensorGraph one = micro_batch_tensor_graph(chain, {});
  ASSERT_EQ(one.forward_nodes, 6);  // recv F1all..F4all Loss
  EXPECT_EQ(one.graph.nodes[5].name, "Loss");
  EXPECT_EQ(one.graph.nodes[6].name, "recv_grad");
  EXPECT_TRUE(std::any_of(one.graph.tensors.begin(), one.graph.tensors.end(),
                          [](const Tensor& t) { return t.size_bytes == 0; }));  // kept here
}

TEST(TensorGraph, OrderEdgesKeepThePipelinePartsInOrder) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 4);
  const TensorGraph graph = stage_tensor_graph(chain, {}, 2);
  EXPECT_FALSE(graph.order_edges.empty());
  for (const Tensor& t : graph.tensors) EXPECT_GT(t.size_bytes, 0) << t.name;
  // Forward part of m1 after that of m0: its recv is ordered after m0's last forward op.
  auto index = [&](const std::string& name) {
    for (std::size_t v = 0; v < graph.nodes.size(); ++v)
      if (graph.nodes[v].name == name) return static_cast<int>(v);
    return -1;
  };
  EXPECT_TRUE(
      std::any_of(graph.order_edges.begin(), graph.order_edges.end(), [&](const OrderEdge& e) {
        return e.before == index("Loss@m0") && e.after == index("recv@m1");
      }));
  TensorGraph backwards = graph;
  backwards.order_edges.push_back({3, 1});
  EXPECT_THROW(check_tensor_graph(backwards), Error);
}

TEST(TensorGraph, StageRejectsAnInvalidSequence) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 2);
  EXPECT_THROW(stage_tensor_graph(chain, parse_remat_sequence("B1", chain), 1), Error);
  EXPECT_THROW(stage_tensor_graph(chain, {}, 0), Error);
}

}  // namespace
}  // namespace madpipe::arena
