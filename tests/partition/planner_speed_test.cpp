// A fast planner plans no worse: periods recorded from the planner before it had a memory floor
// and a time budget (bench/planner_bench phases memories, heuristic scheduler), and what a
// request cut short by its time limit returns.

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/planner.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/search.hpp"
#include "schedule/stage.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {
struct Recorded {
  const char* profile;
  int gpus;
  std::int64_t memory_bytes;  // twice what no plan can go below, as planner_bench phases
  double period_ms;
};

// The planner of before, on every shipped profile at 12 GB/s with C = 3.
constexpr Recorded kRecorded[] = {
    {"resnet50", 2, 14603085280, 85.3333333},  {"resnet50", 4, 7301542640, 199.568665},
    {"resnet50", 8, 5399918592, 412.901999},   {"resnet50", 16, 5399918592, 412.901999},
    {"gpt2_small", 2, 9880928256, 30.397676},  {"gpt2_small", 4, 9880928256, 23.391},
    {"gpt2_small", 8, 9880928256, 23.391},     {"gpt2_small", 16, 9880928256, 23.391},
    {"gpt2_xl16", 2, 11067752448, 37.6415667}, {"gpt2_xl16", 4, 5533876224, 33.299},
    {"gpt2_xl16", 8, 4945084416, 20.6711},     {"gpt2_xl16", 16, 4945084416, 20.6711},
    {"densenet121", 2, 21332258016, 146.4505}, {"densenet121", 4, 10666129008, 176.468767},
};

madpipe::Platform platform_of(int gpus, std::int64_t memory_bytes) {
  return mt::make_platform(gpus, memory_bytes, 12e6, 3);
}
}  // namespace

TEST(PlannerSpeed, NoWorseThanRecordedPeriodsOnTheShippedProfiles) {
  for (const Recorded& recorded : kRecorded) {
    SCOPED_TRACE(std::string(recorded.profile) + " on " + std::to_string(recorded.gpus) + " GPUs");
    const madpipe::Profile profile =
        madpipe::read_profile(mt::shipped_profile_path(recorded.profile));
    mp::PlannerOptions options;
    options.scheduler = mp::Scheduler::Heuristic;
    const mp::PlanResult result =
        mp::make_plan(profile, platform_of(recorded.gpus, recorded.memory_bytes), options);
    ASSERT_TRUE(result.feasible) << result.reason;
    EXPECT_TRUE(madpipe::plan::validate(result.plan, profile).empty());
    // The recorded periods have 9 significant digits.
    EXPECT_LE(result.plan.predicted.period_ms, recorded.period_ms * (1 + 1e-8));
    EXPECT_FALSE(result.cut_by_time_limit);
  }
}

// Out of time from the start, a request still returns a valid plan where one fits (the work that
// gives a first plan always runs), says what was cut, and where the time went.
TEST(PlannerSpeed, CutByTheTimeLimitItReturnsAValidPlanAndSaysSo) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("densenet121"));
  mp::PlannerOptions options;
  options.time_limit_s = 1e-9;
  const mp::PlanResult result =
      mp::make_plan(profile, platform_of(8, std::int64_t{6} << 30), options);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(madpipe::plan::validate(result.plan, profile).empty());
  EXPECT_TRUE(result.cut_by_time_limit);
  ASSERT_FALSE(result.notes.empty());
  const std::string& note = result.notes.back();
  EXPECT_EQ(note.rfind("the time limit of 1e-09 s cut planning short: ", 0), 0u) << note;
  EXPECT_NE(note.find("MadPipe-DP"), std::string::npos) << note;
  EXPECT_NE(note.find("a longer --time-limit may find a shorter period"), std::string::npos)
      << note;
  ASSERT_FALSE(result.phases.empty());
  EXPECT_EQ(result.phases.front().phase, "contiguous-dp");
}

// Below what any allocation needs, a request is refused without planning; below the memory floor
// the contiguous algorithms too.
TEST(PlannerSpeed, HopelessRequestsAreRefusedWithoutPlanning) {
  const madpipe::Profile profile = madpipe::read_profile(mt::shipped_profile_path("densenet121"));
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform probe = platform_of(2, 1);
  for (mp::Algorithm algorithm : {mp::Algorithm::MadPipe, mp::Algorithm::Contiguous}) {
    mp::PlannerOptions options;
    options.algorithm = algorithm;
    const mp::MemoryFloor floor = mp::algorithm_memory_floor(costs, probe, options);
    const std::int64_t below =
        (algorithm == mp::Algorithm::MadPipe ? floor.any_allocation_bytes : floor.bytes) - 1;
    const mp::PlanResult result = mp::make_plan(profile, platform_of(2, below), options);
    EXPECT_FALSE(result.feasible);
    EXPECT_TRUE(result.phases.empty()) << mp::to_string(algorithm);  // no phase ran
  }
}

namespace {
// A Llama-3-70B-shaped chain (bf16, sequence 4096): embedding, `blocks` equal blocks, head and
// loss, with times and bytes of that shape.
madpipe::Profile llm_chain(int blocks) {
  constexpr std::int64_t kMiB = std::int64_t{1} << 20;
  madpipe::Profile profile;
  profile.name = "llm";
  profile.device = "test";
  profile.dtype = "bfloat16";
  profile.batch = 1;
  profile.input_bytes = 32 * 1024;
  auto add = [&](const std::string& name, double forward_ms, std::int64_t weight_mib,
                 std::int64_t saved_mib, std::int64_t output_bytes, std::int64_t workspace_mib) {
    madpipe::Layer layer;
    layer.name = name;
    layer.forward_ms = forward_ms;
    layer.backward_ms = 2 * forward_ms;
    layer.weight_bytes = weight_mib * kMiB;
    layer.saved_bytes = saved_mib * kMiB;
    layer.output_bytes = output_bytes;
    layer.forward_workspace_bytes = layer.backward_workspace_bytes = workspace_mib * kMiB;
    profile.layers.push_back(layer);
  };
  add("embed", 0.16, 2004, 0, 64 * kMiB, 64);
  for (int b = 0; b < blocks; ++b)
    add("block" + std::to_string(b), 15.3, 1632, 1568, 64 * kMiB, 672);
  add("head", 13.8, 2004, 64, 64 * kMiB, 1002);
  add("loss", 0.15, 0, 2004, 4, 2004);
  return profile;
}
}  // namespace

// At cluster scale the time limit still bounds the request: out of time from the start, a 64-GPU
// plan of an 83-layer chain is the cheap first plan (each candidate allocation tried at its
// longest period until one fits, none searched), valid, and the result says how many candidate
// allocations were searched. A clock that only moves with the planner's reads makes it exact.
TEST(PlannerSpeed, AtClusterScaleTheFirstPlanIsCheapAndTheCountsSaySo) {
  const madpipe::Profile profile = llm_chain(80);
  const madpipe::Platform platform = mt::make_platform(64, std::int64_t{80} << 30, 25e6, 8);
  double now = 0;
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  options.time_limit_s = 1;
  options.clock = [&now] { return now += 10.0; };  // every reading is past the limit
  const mp::PlanResult result = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(madpipe::plan::validate(result.plan, profile).empty());
  EXPECT_TRUE(result.cut_by_time_limit);
  EXPECT_GT(result.allocations_total, 0);
  EXPECT_EQ(result.allocations_scheduled, 0);
}

// Without a limit every candidate allocation is searched to the end, and none is cut.
TEST(PlannerSpeed, WithoutALimitEveryCandidateAllocationIsSearched) {
  const madpipe::Profile profile = llm_chain(30);
  const madpipe::Platform platform = mt::make_platform(8, std::int64_t{80} << 30, 25e6, 8);
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  const mp::PlanResult result = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_FALSE(result.cut_by_time_limit);
  EXPECT_GT(result.allocations_total, 1);
  EXPECT_EQ(result.allocations_scheduled, result.allocations_total);
}

// The schedule search of one allocation at cluster scale counts its work: 64 GPUs, each holding
// one or two blocks of the Llama-70B-shaped chain, memory tight enough that the search tries
// k-periodic variants. Every variant's memory is told from its 1-periodic pattern (one stage per
// GPU), none is built to be measured, and only those that may beat the best are built and
// retimed.
TEST(PlannerSpeed, AtClusterScaleTheScheduleSearchBuildsNoVariantToMeasureIt) {
  const madpipe::Profile profile = llm_chain(80);
  const madpipe::ChainCosts costs(profile);
  madpipe::Platform platform = mt::make_platform(64, std::int64_t{60} << 30, 25e6, 10);
  std::vector<int> first_layers, gpus;
  for (int s = 0, layer = 0; s < 64; ++s) {
    first_layers.push_back(layer);
    gpus.push_back(s);
    layer += s == 0 ? 2 : (s < 19 ? 2 : 1) + (s == 63 ? 2 : 0);
  }
  const std::vector<madpipe::schedule::Stage> stages =
      madpipe::schedule::make_stages(costs, first_layers, gpus);
  madpipe::schedule::ScheduleSearchStats stats;
  madpipe::schedule::ScheduleSearchOptions options;
  options.stats = &stats;
  const auto found = madpipe::schedule::schedule_under_memory(stages, platform, options);
  ASSERT_TRUE(found.has_value());
  EXPECT_TRUE(madpipe::schedule::fits_memory(stages, found->pattern, platform));
  EXPECT_EQ(stats.variants_measured, 0);
  EXPECT_GT(stats.patterns_generated, 0);
  EXPECT_LT(stats.candidates_retimed, stats.patterns_generated / 4);
  std::cout << "64 stages: " << stats.patterns_generated << " patterns generated, "
            << stats.candidates_retimed << " retimed, best " << found->method << "\n";
}

// Where memory binds plans that keep every activation (12 blocks on 8 GPUs of 14 GiB keeping 3
// weight copies: none beats 1.7 times the compute bound), the search with rematerialization runs
// first, and a time limit that runs out after one search cuts the plain one: the plan
// rematerializes and is shorter than any plan without. (Searched first, the plain plan was kept,
// above the memory bound.) The clock stops until the second search starts, then is past the limit.
TEST(PlannerSpeed, WhereMemoryBindsTheTimeLimitCutsThePlainSearch) {
  const madpipe::Profile profile = llm_chain(12);
  const madpipe::ChainCosts costs(profile);
  const madpipe::Platform platform = mt::make_platform(8, std::int64_t{14} << 30, 25e6, 3);
  const double memory_bound = mp::memory_bound_period_ms(costs, platform);
  ASSERT_GT(memory_bound, 1.5 * mp::lower_bound_period_ms(costs, platform));
  double now = 0;
  std::vector<std::string> lines;
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Heuristic;
  options.remat.remat = mp::RematStrategy::Rotor;
  options.time_limit_s = 10;
  options.clock = [&now] { return now; };
  options.detailed_progress = true;
  options.progress = [&](const std::string& line) {
    lines.push_back(line);
    if (line.find("planning again") != std::string::npos) now = 100;
  };
  const mp::PlanResult result = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(result.feasible) << result.reason;
  EXPECT_TRUE(madpipe::plan::validate(result.plan, profile).empty());
  EXPECT_TRUE(result.cut_by_time_limit);
  EXPECT_LT(result.plan.predicted.period_ms, memory_bound);
  const bool recomputes =
      std::any_of(result.plan.stages.begin(), result.plan.stages.end(),
                  [](const ms::Stage& stage) { return stage.remat != ms::RematStrategy::None; });
  EXPECT_TRUE(recomputes);
  const bool said_why = std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find(
               "memory binds plans that keep every activation: planning with per-stage "
               "rematerialization first") != std::string::npos;
  });
  EXPECT_TRUE(said_why);
}

// The run that goes second spends no stage ILP on an allocation that cannot beat the first run's
// plan: on the chain above, every stage ILP of the plain run is skipped against the period of the
// plan with rematerialization (its plain allocations' memory bounds are above it).
TEST(PlannerSpeed, TheSecondRunSkipsStageIlpsThatCannotBeatTheFirst) {
  if (madpipe::solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
  const madpipe::Profile profile = llm_chain(12);
  const madpipe::Platform platform = mt::make_platform(8, std::int64_t{14} << 30, 25e6, 3);
  std::vector<std::string> lines;
  mp::PlannerOptions options;
  options.scheduler = mp::Scheduler::Ilp;
  options.remat.remat = mp::RematStrategy::Rotor;
  options.detailed_progress = true;
  options.progress = [&](const std::string& line) { lines.push_back(line); };
  const mp::PlanResult result = mp::make_plan(profile, platform, options);
  ASSERT_TRUE(result.feasible) << result.reason;
  const auto second = std::find_if(lines.begin(), lines.end(), [](const std::string& line) {
    return line.find("planning again without per-stage rematerialization") != std::string::npos;
  });
  ASSERT_NE(second, lines.end());
  const std::string skipped = "skipped, no pattern of this allocation beats " +
                              madpipe::format_ms(result.plan.predicted.period_ms);
  int stage_ilps = 0;
  for (auto line = second; line != lines.end(); ++line) {
    if (line->find("ilp scheduler on ") == std::string::npos) continue;
    ++stage_ilps;
    EXPECT_NE(line->find(skipped), std::string::npos) << *line;
  }
  EXPECT_GT(stage_ilps, 0);
}
