// What the planner says when no plan fits: the smallest memory, with and without
// rematerialization, and a layer too large for a GPU.

#include "partition/infeasible.hpp"

#include "core/profile.hpp"
#include "support/test_support.hpp"

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace mt = madpipe::testing;

TEST(ExplainInfeasible, NamesTheSmallestMemoryAndWhatRematerializationGains) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("gpt2_xl16"));
  const madpipe::Platform platform = mt::make_platform(2, std::int64_t{3} << 30, 12e6, 3);
  const mp::PlanResult result = mp::make_plan(profile, platform);
  ASSERT_FALSE(result.feasible);
  const std::string text = mp::explain_infeasible(result.reason, profile, platform, {});
  EXPECT_EQ(text.rfind(result.reason, 0), 0u) << text;
  EXPECT_NE(text.find("the smallest memory per GPU for which madpipe finds a plan is "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("with --remat rotor (recompute activations in the backward) it is "),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("alone keeps"), std::string::npos) << text;  // every layer fits 3 GiB
}

TEST(ExplainInfeasible, NamesALayerTooLargeForAnyGpu) {
  // Layer 1 keeps 3 x 400 bytes of weights: more than the 1000 bytes of a GPU.
  const madpipe::Profile profile = mt::make_chain({1, 1, 1}, {1, 1, 1}, {10, 400, 10}, {1, 1, 1});
  const madpipe::Platform platform = mt::make_platform(4, 1000, 1e6, 3);
  const std::string text = mp::explain_infeasible("no plan fits", profile, platform, {});
  EXPECT_NE(text.find("layer 1 (" + profile.layers[1].name + ") alone keeps"), std::string::npos)
      << text;
}

TEST(ExplainInfeasible, OffloadingFloorsSayOffloadingAndSuggestRecomputingAsWell) {
  // A GPT of width 1024 on one GPU: offloading alone needs about 2.1 GiB, with recomputation
  // about 1.5 GiB.
  const madpipe::Profile profile =
      madpipe::read_profile(mt::test_data_path("profiles/gpt_w1024_h200.json"));
  madpipe::Platform platform = mt::make_platform(1, std::int64_t{1800} << 20, 1e8, 3);
  platform.host_bandwidth_bytes_per_ms = 55.3e6;
  mp::PlannerOptions options;
  options.micro_batches_per_step = 4;
  options.remat.offload = madpipe::partition::OffloadStrategy::Host;
  options.remat.host_bytes_per_ms = platform.host_bandwidth_bytes_per_ms;
  const mp::PlanResult result = mp::make_plan(profile, platform, options);
  ASSERT_FALSE(result.feasible);
  const std::string text = mp::explain_infeasible(result.reason, profile, platform, options);
  EXPECT_NE(text.find("in flight, offloading;"), std::string::npos) << text;
  EXPECT_EQ(text.find("rematerializing"), std::string::npos) << text;
  EXPECT_NE(text.find("with --remat rotor as well (recompute activations in the backward too) "
                      "it is "),
            std::string::npos)
      << text;
}
