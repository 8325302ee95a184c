#include "schedule/memory.hpp"

#include "core/chain.hpp"
#include "schedule/stage.hpp"
#include "support/test_support.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

madpipe::Profile three_layers() {
  madpipe::Profile profile = mt::make_chain({1, 1, 1}, {2, 2, 2}, {100, 200, 400}, {10, 20, 40}, 5);
  profile.layers[0].saved_bytes = 1000;
  profile.layers[1].backward_workspace_bytes = 3000;
  profile.layers[2].forward_workspace_bytes = 2000;
  return profile;
}

}  // namespace

TEST(StageMemory, TermsOfAStageAloneOnItsGpu) {
  const madpipe::ChainCosts costs(three_layers());
  const madpipe::Platform platform = mt::make_platform(3, mt::kHugeMemory, 1e6, 2);
  // The middle layer receives a_0 = 10 and sends a_1 = 20, each with its gradient.
  const ms::StageMemory middle = ms::stage_memory(costs, 1, 1, platform);
  EXPECT_EQ(middle.weights, 2 * 200);
  EXPECT_EQ(middle.buffers, 2 * 10 + 2 * 20);
  EXPECT_EQ(middle.workspace, 3000);
  EXPECT_EQ(middle.stored, 10);
  EXPECT_EQ(middle.fixed(), 400 + 60);
  EXPECT_EQ(middle.total(3), 400 + 60 + 3 * 10 + 3000);
  // The whole chain neither receives nor sends; it keeps the input and what layer 0 saves.
  const ms::StageMemory whole = ms::stage_memory(costs, 0, 2, platform);
  EXPECT_EQ(whole.weights, 2 * 700);
  EXPECT_EQ(whole.buffers, 0);
  EXPECT_EQ(whole.workspace, 3000);
  EXPECT_EQ(whole.stored, 5 + 1000 + 10 + 20);
  // The middle layer with its neighbours on its GPU: no buffers, one micro-batch in flight.
  EXPECT_EQ(ms::layer_alone_bytes(costs, 1, platform), 400 + 10 + 3000);
}

TEST(StageMemory, PlannedStagesAndChainRangesGiveTheSameTerms) {
  std::mt19937 rng(11);
  const madpipe::Profile profile = mt::random_chain(rng, 9);
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::huge_memory_platform(3);
  // Every stage on a GPU of its own: both views count the same buffers.
  const std::vector<ms::Stage> stages = ms::make_stages(costs, {0, 2, 5, 6}, {0, 1, 2, 1});
  for (int s = 0; s < static_cast<int>(stages.size()); ++s) {
    const ms::StageMemory planned = ms::stage_memory(stages, s, platform);
    const ms::StageMemory range =
        ms::stage_memory(costs, stages[s].first_layer, stages[s].last_layer, platform);
    EXPECT_EQ(planned.weights, range.weights) << "stage " << s;
    EXPECT_EQ(planned.buffers, range.buffers) << "stage " << s;
    EXPECT_EQ(planned.workspace, range.workspace) << "stage " << s;
    EXPECT_EQ(planned.stored, range.stored) << "stage " << s;
  }
}

TEST(StageMemory, NeighboursOnTheSameGpuNeedNoBuffers) {
  const madpipe::ChainCosts costs(three_layers());
  const madpipe::Platform platform = mt::make_platform(2, mt::kHugeMemory, 1e6, 1);
  // Stages 0 and 1 share GPU 0, stage 2 is on GPU 1; then stages 0 and 2 share GPU 0.
  std::vector<ms::Stage> stages = ms::make_stages(costs, {0, 1, 2}, {0, 0, 1});
  EXPECT_EQ(ms::stage_memory(stages, 0, platform).buffers, 0);
  EXPECT_EQ(ms::stage_memory(stages, 1, platform).buffers, 2 * 20);
  const ms::GpuMemory gpu0 = ms::static_memory(stages, 0, platform);
  EXPECT_EQ(gpu0.weights, 100 + 200);
  EXPECT_EQ(gpu0.buffers, 2 * 20);
  EXPECT_EQ(gpu0.workspace, 3000);  // the largest of its stages', not their sum
  stages = ms::make_stages(costs, {0, 1, 2}, {0, 1, 0});
  EXPECT_EQ(ms::static_memory(stages, 0, platform).buffers, 2 * 10 + 2 * 20);
  EXPECT_EQ(ms::static_memory(stages, 1, platform).buffers, 2 * 10 + 2 * 20);
}

TEST(StageMemory, SumsSaturateInsteadOfOverflowing) {
  const madpipe::ChainCosts costs(three_layers());
  madpipe::Platform platform = mt::make_platform(1, mt::kHugeMemory, 1e6, 1);
  const ms::StageMemory whole = ms::stage_memory(costs, 0, 2, platform);
  EXPECT_EQ(whole.total(INT64_MAX / 2), INT64_MAX);
}
