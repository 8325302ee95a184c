// The partitioners with per-stage rematerialization (--remat rotor): plans stay valid, replay at
// their period within their memory, and are never worse than without rematerialization.

#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "partition/stage_options.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "remat/remat_sequence.hpp"
#include "support/test_support.hpp"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mremat = madpipe::remat;
namespace mt = madpipe::testing;

namespace {

constexpr std::int64_t kGiB = 1024LL * 1024 * 1024;

mp::PlanResult plan_with(const madpipe::Profile& profile, mp::Algorithm algorithm,
                         std::int64_t memory, bool rotor) {
  mp::PlannerOptions options;
  options.algorithm = algorithm;
  options.scheduler = mp::Scheduler::Heuristic;
  options.remat.remat =
      rotor ? madpipe::partition::RematStrategy::Rotor : madpipe::partition::RematStrategy::None;
  return mp::make_plan(profile, mt::make_platform(4, memory, 12e6, 3), options);
}

int remat_stages(const mplan::Plan& plan) {
  int count = 0;
  for (const ms::Stage& stage : plan.stages) count += stage.remat == ms::RematStrategy::Rotor;
  return count;
}

void expect_valid_and_replayable(const mplan::Plan& plan, const madpipe::Profile& profile) {
  const auto violations = mplan::validate(plan, profile);
  for (const auto& v : violations) ADD_FAILURE() << v.field << ": " << v.problem;
  const mplan::SimResult sim = mplan::simulate(plan, {});
  ASSERT_GT(sim.steady_period_ms, 0);
  EXPECT_NEAR(sim.steady_normalized_ms, plan.predicted.period_ms, 1e-6 * plan.predicted.period_ms);
  for (std::size_t g = 0; g < sim.peak_memory_bytes.size(); ++g)
    EXPECT_LE(sim.peak_memory_bytes[g], plan.platform.memory_bytes) << "gpu " << g;
}

}  // namespace

TEST(RematPlanner, ResNet50OnFourGpusGainsFromRematerialization) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const mp::PlanResult plain = plan_with(profile, mp::Algorithm::MadPipe, 8 * kGiB, false);
  const mp::PlanResult remat = plan_with(profile, mp::Algorithm::MadPipe, 8 * kGiB, true);
  ASSERT_TRUE(plain.feasible);
  ASSERT_TRUE(remat.feasible) << remat.reason;
  EXPECT_LT(remat.plan.predicted.period_ms, plain.plan.predicted.period_ms);
  EXPECT_GE(remat_stages(remat.plan), 1);
  EXPECT_EQ(remat_stages(plain.plan), 0);
  expect_valid_and_replayable(remat.plan, profile);
}

TEST(RematPlanner, FindsPlansWhereNothingFitsWithoutRematerialization) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  for (mp::Algorithm algorithm : {mp::Algorithm::MadPipe, mp::Algorithm::Contiguous,
                                  mp::Algorithm::OneFOneB, mp::Algorithm::PipeDream}) {
    const mp::PlanResult plain = plan_with(profile, algorithm, 5 * kGiB, false);
    const mp::PlanResult remat = plan_with(profile, algorithm, 5 * kGiB, true);
    EXPECT_FALSE(plain.feasible) << mp::to_string(algorithm);
    ASSERT_TRUE(remat.feasible) << mp::to_string(algorithm) << ": " << remat.reason;
    EXPECT_GE(remat_stages(remat.plan), 1) << mp::to_string(algorithm);
    expect_valid_and_replayable(remat.plan, profile);
  }
}

TEST(RematPlanner, NeverWorseThanWithoutOnTheShippedProfiles) {
  for (const char* name : {"gpt2_small", "gpt2_xl16"}) {
    const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path(name));
    const std::int64_t smallest =
        mp::smallest_feasible_memory(profile, mt::make_platform(4, 64 * kGiB, 12e6, 3), [] {
          mp::PlannerOptions o;
          o.algorithm = mp::Algorithm::Contiguous;
          return o;
        }());
    ASSERT_GT(smallest, 0) << name;
    for (double factor : {1.0, 1.3}) {
      const auto memory = static_cast<std::int64_t>(smallest * factor);
      const mp::PlanResult plain = plan_with(profile, mp::Algorithm::Contiguous, memory, false);
      const mp::PlanResult remat = plan_with(profile, mp::Algorithm::Contiguous, memory, true);
      ASSERT_TRUE(plain.feasible) << name;
      ASSERT_TRUE(remat.feasible) << name;
      EXPECT_LE(remat.plan.predicted.period_ms, plain.plan.predicted.period_ms * (1 + 1e-9))
          << name << " x" << factor;
      expect_valid_and_replayable(remat.plan, profile);
    }
  }
}

TEST(RematPlanner, ValidatorChecksSequencesAgainstTheProfile) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  const mp::PlanResult remat = plan_with(profile, mp::Algorithm::MadPipe, 5 * kGiB, true);
  ASSERT_TRUE(remat.feasible);
  std::size_t s = 0;
  while (remat.plan.stages[s].remat != ms::RematStrategy::Rotor) ++s;
  auto violations_after = [&](auto&& change) {
    mplan::Plan plan = remat.plan;
    change(plan.stages[s]);
    return mplan::validate(plan, profile);
  };
  auto mentions = [](const std::vector<mplan::Violation>& list, const std::string& text) {
    for (const mplan::Violation& v : list)
      if ((v.field + ": " + v.problem).find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(violations_after([](ms::Stage&) {}).empty());
  EXPECT_TRUE(
      mentions(violations_after([](ms::Stage& st) { st.backward_ms *= 0.9; }), "backward_ms"));
  EXPECT_TRUE(
      mentions(violations_after([](ms::Stage& st) { st.stored_bytes /= 2; }), "stored_bytes"));
  EXPECT_TRUE(
      mentions(violations_after([](ms::Stage& st) { st.sequence += " F999all"; }), "sequence"));
  EXPECT_TRUE(
      mentions(violations_after([](ms::Stage& st) { st.sequence.clear(); }), "is required"));
}

TEST(RematPlanner, StageOptionsAreFastestFirstAndFitQueries) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("resnet50"));
  mp::StageOptions options(profile, mp::RematSettings{mp::RematStrategy::Rotor, 200, 24});
  const auto& front = options.of(0, 7);
  ASSERT_GE(front.size(), 2u);
  for (std::size_t i = 1; i < front.size(); ++i)
    EXPECT_LE(front[i - 1].backward_ms, front[i].backward_ms);
  const mremat::RematOption& slowest = front.back();
  const double budget = 3.0 * static_cast<double>(slowest.stored_bytes) + slowest.transient_bytes;
  const int fit = options.fastest_fitting(0, 7, 3, budget);
  ASSERT_GE(fit, 0);
  EXPECT_LE(3.0 * front[fit].stored_bytes + front[fit].transient_bytes, budget);
  for (int i = 0; i < fit; ++i)
    EXPECT_GT(3.0 * front[i].stored_bytes + front[i].transient_bytes, budget);
  EXPECT_EQ(options.fastest_fitting(0, 7, 3, 1.0), -1);
  EXPECT_EQ(options.ranges_computed(), 1u);
}

// Eight equal layers whose activations a fast host link can carry during the forward.
static madpipe::Profile offloadable_profile() {
  madpipe::Profile profile;
  profile.name = "offloadable";
  profile.input_bytes = 100'000'000;
  for (int l = 0; l < 8; ++l) {
    madpipe::Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 10;
    layer.backward_ms = 20;
    layer.weight_bytes = 10'000'000;
    layer.output_bytes = 100'000'000;
    layer.saved_bytes = 300'000'000;
    profile.layers.push_back(layer);
  }
  return profile;
}

TEST(RematPlanner, StageOptionsAreComputedOncePerDistinctStageChain) {
  madpipe::Profile profile = offloadable_profile();
  profile.layers[0].forward_ms = 11;  // the run of identical layers is 1..7
  mp::StageOptions options(profile, mp::RematSettings{mp::RematStrategy::Rotor, 200, 24});
  const auto& shifted = options.of(1, 3);
  ASSERT_FALSE(shifted.empty());
  EXPECT_EQ(&options.of(4, 6), &shifted);
  EXPECT_EQ(options.least_bytes(2, 4, 3), options.least_bytes(5, 7, 3));
  EXPECT_EQ(options.ranges_computed(), 1u);
  const auto& with_first = options.of(0, 2);
  EXPECT_NE(&with_first, &shifted);
  EXPECT_EQ(options.ranges_computed(), 2u);
  EXPECT_NE(&options.of(1, 4), &shifted);
  EXPECT_EQ(options.ranges_computed(), 3u);
}

TEST(RematPlanner, OffloadingToTheHostShortensThePeriodWhenTheLinkIsFast) {
  const madpipe::Profile profile = offloadable_profile();
  madpipe::Platform platform = mt::make_platform(2, 2'000'000'000, 12e6, 3);
  platform.host_bandwidth_bytes_per_ms = 100e6;  // 100 GB/s
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  const mp::PlanResult plain = mp::make_plan(profile, platform, options);
  options.remat.offload = madpipe::partition::OffloadStrategy::Host;
  options.remat.host_bytes_per_ms = platform.host_bandwidth_bytes_per_ms;
  const mp::PlanResult offload = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(plain.feasible);
  ASSERT_TRUE(offload.feasible) << offload.reason;
  EXPECT_LT(offload.plan.predicted.period_ms, plain.plan.predicted.period_ms * 0.9);
  int offloading = 0;
  for (const ms::Stage& stage : offload.plan.stages) {
    if (stage.offload != ms::OffloadStrategy::Host) continue;
    ++offloading;
    EXPECT_NE(stage.sequence.find(" O"), std::string::npos) << stage.sequence;
  }
  EXPECT_GE(offloading, 1);
  expect_valid_and_replayable(offload.plan, profile);
  // The validator needs the host link to check an offloading stage.
  mplan::Plan no_link = offload.plan;
  no_link.platform.host_bandwidth_bytes_per_ms = 0;
  bool reported = false;
  for (const mplan::Violation& v : mplan::validate(no_link, profile))
    reported = reported || v.field == "/platform/host_bandwidth_bytes_per_ms";
  EXPECT_TRUE(reported);
}

// One GPU, where only recomputation makes the chain fit: its period is longer than running the
// chain in sequence without it, which the DPs' search for a period must reach (a GPT measured on
// an H200: 1.5 GiB of weights and optimizer state, 1.4 GiB of activations).
TEST(RematPlanner, OneGpuRecomputesWhereOnlyThatFits) {
  const madpipe::Profile profile =
      madpipe::read_profile(mt::test_data_path("profiles/gpt_w1024_h200.json"));
  double sequential_ms = 0;
  for (const madpipe::Layer& layer : profile.layers)
    sequential_ms += layer.forward_ms + layer.backward_ms;
  mp::PlannerOptions options;
  options.remat.remat = madpipe::partition::RematStrategy::Rotor;
  const madpipe::Platform loose = mt::make_platform(1, 64 * kGiB, 1e8, 4);
  const std::int64_t floor = mp::smallest_feasible_memory(profile, loose, options);
  options.remat.remat = madpipe::partition::RematStrategy::None;
  const std::int64_t plain_floor = mp::smallest_feasible_memory(profile, loose, options);
  ASSERT_LT(floor, plain_floor);
  options.remat.remat = madpipe::partition::RematStrategy::Rotor;
  for (double at : {0.0, 0.5}) {
    const auto memory = static_cast<std::int64_t>(floor + at * (plain_floor - floor));
    const mp::PlanResult result =
        mp::make_plan(profile, mt::make_platform(1, memory, 1e8, 4), options);
    ASSERT_TRUE(result.feasible) << memory << ": " << result.reason;
    EXPECT_GT(result.plan.predicted.period_ms, sequential_ms);
    EXPECT_EQ(remat_stages(result.plan), 1);
    expect_valid_and_replayable(result.plan, profile);
  }
}

// Offloading plans count the memory of a runtime that does not hold a forward back for its
// offloads to finish (the validator's replay), at every memory where they fit on one GPU.
TEST(RematPlanner, OffloadingPlansHoldTheirMemoryWithoutWaitingForCopies) {
  const madpipe::Profile profile =
      madpipe::read_profile(mt::test_data_path("profiles/gpt_w1024_h200.json"));
  mp::PlannerOptions options;
  options.remat.offload = madpipe::partition::OffloadStrategy::Host;
  options.remat.host_bytes_per_ms = 55e6;  // 55 GB/s
  madpipe::Platform platform = mt::make_platform(1, 64 * kGiB, 1e8, 4);
  platform.host_bandwidth_bytes_per_ms = options.remat.host_bytes_per_ms;
  int offloading = 0;
  for (double gib = 1.6; gib <= 3.0; gib += 0.1) {
    platform.memory_bytes = static_cast<std::int64_t>(gib * kGiB);
    const mp::PlanResult result = mp::make_plan(profile, platform, options);  // validates
    if (!result.feasible) continue;
    for (const ms::Stage& stage : result.plan.stages)
      offloading += stage.sequence.find(" O") != std::string::npos;
    const auto violations = mplan::validate(result.plan, profile);
    EXPECT_TRUE(violations.empty()) << gib << " GiB: " << violations.front().problem;
  }
  EXPECT_GE(offloading, 1);
}
