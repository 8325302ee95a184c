// Plans exported for torchtitan (plan/torchtitan_export.hpp): its looped placement of stages on
// ranks, the module names of each stage, and the settings that run the CSV.

#include "plan/torchtitan_export.hpp"

#include "core/error.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "support/planner_support.hpp"
#include "support/test_support.hpp"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mplan = madpipe::plan;
namespace mp = madpipe::partition;
namespace mt = madpipe::testing;

namespace {

mplan::Plan shipped_plan(const std::string& profile_name, mp::Algorithm algorithm) {
  return mt::shipped_plan(profile_name, algorithm, 4, 16, 12);
}

std::vector<std::vector<std::string>> layer_names(const mplan::Plan& plan) {
  std::vector<std::vector<std::string>> names;
  for (int l = 0; l <= plan.stages.back().last_layer; ++l)
    names.push_back({"m" + std::to_string(l)});
  return names;
}

std::string error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const madpipe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TorchtitanExport, InterleavedStagesKeepTheirLoopedRanksAndModuleNames) {
  const mplan::Plan plan = shipped_plan("gpt2_small", mp::Algorithm::Interleaved);
  ASSERT_EQ(plan.stages.size(), 8u);
  const mplan::TorchtitanExport exported = mplan::torchtitan_export(plan, 8, layer_names(plan));
  ASSERT_EQ(exported.parts.size(), 8u);
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    EXPECT_EQ(exported.schedule.stage_to_rank[s], static_cast<int>(s % 4));
    EXPECT_EQ(exported.parts[s].front(), "m" + std::to_string(plan.stages[s].first_layer));
    EXPECT_EQ(exported.parts[s].back(), "m" + std::to_string(plan.stages[s].last_layer));
  }
  const mplan::TorchSchedule plain = mplan::torch_schedule(plan, 8);
  for (int g = 0; g < 4; ++g)  // the same rows, in torchtitan's rank order
    EXPECT_EQ(exported.schedule.actions[exported.rank_of_gpu[g]], plain.actions[g]);
  const std::string toml = mplan::torchtitan_toml(exported, "/runs/schedule.csv", 2);
  EXPECT_NE(toml.find("pipeline_parallel_degree = 4\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("pipeline_parallel_schedule = \"PipelineScheduleMulti\"\n"),
            std::string::npos);
  EXPECT_NE(toml.find("pipeline_parallel_schedule_csv = \"/runs/schedule.csv\"\n"),
            std::string::npos);
  EXPECT_NE(toml.find("pipeline_parallel_microbatch_size = 2\n"), std::string::npos);
  EXPECT_NE(toml.find("local_batch_size = 16\n"), std::string::npos);
}

TEST(TorchtitanExport, GpusAreRenumberedIntoTheLoopedOrderOnOneNodeOnly) {
  mplan::Plan plan = shipped_plan("gpt2_small", mp::Algorithm::Interleaved);
  for (auto& stage : plan.stages) stage.gpu = 3 - stage.gpu;  // the same plan on GPUs in reverse
  EXPECT_EQ(mplan::torchtitan_ranks(plan), (std::vector<int>{3, 2, 1, 0}));
  plan.platform.gpus_per_node = 2;
  EXPECT_NE(error_of([&] {
              mplan::torchtitan_ranks(plan);
            }).find("on a multi-node platform torchtitan's rank order cannot be changed"),
            std::string::npos);
}

TEST(TorchtitanExport, PlacementsTorchtitanCannotRunAreRefusedNamingTheStages) {
  const mplan::Plan v = shipped_plan("gpt2_small", mp::Algorithm::ZbV);  // a V: 3 and 4 share
  const std::string refusal = error_of([&] { mplan::torchtitan_export(v, 8, layer_names(v)); });
  EXPECT_NE(refusal.find("GPU 3 holds stages 3, 4, but torchtitan places stage s on rank s % 4"),
            std::string::npos)
      << refusal;
  const mplan::Plan three = shipped_plan("gpt2_small", mp::Algorithm::OneFOneB);  // 3 on 4 GPUs
  EXPECT_NE(error_of([&] {
              mplan::torchtitan_export(three, 4, layer_names(three));
            }).find("but the plan has 3 stages"),
            std::string::npos);
  const mplan::Plan plan = shipped_plan("resnet50", mp::Algorithm::Contiguous);
  EXPECT_NE(error_of([&] {
              mplan::torchtitan_export(plan, 4, {{"a"}});
            }).find("module-names: 1 entries, but the plan's chain has"),
            std::string::npos);
}

TEST(TorchtitanExport, DecoderLayersGetTorchtitansLlamaNames) {
  madpipe::Profile profile;
  profile.name = "llama";
  for (const char* name : {"embed", "block0", "block1", "head"}) {
    madpipe::Layer layer;
    layer.name = name;
    profile.layers.push_back(layer);
  }
  const std::vector<std::vector<std::string>> expected{
      {"tok_embeddings"}, {"layers.0"}, {"layers.1"}, {"norm", "output"}};
  EXPECT_EQ(mplan::decoder_module_names(profile, "llama.json"), expected);
  profile.layers[2].name = "mlp";
  EXPECT_NE(error_of([&] {
              mplan::decoder_module_names(profile, "llama.json");
            }).find("llama.json: /layers/2/name: 'mlp' is not a layer of madpipe's decoder"),
            std::string::npos);
}
