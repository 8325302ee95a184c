// ILP benchmarks (thesis ch. 6 and 7.2), printed as tables with ratios; nothing is asserted.
//
//   ilp_bench full [SECONDS]   full ILP on the first 12 layers of ResNet-50, P = 4: cold and
//                              warm-started, time to the first solution, gap at the time limit,
//                              against MadPipe on the same instance
//   ilp_bench stage [SECONDS]  stage-level ILP on MadPipe's allocations of the shipped profiles,
//                              P = 4 and 8: period gained over the heuristic scheduler
//   ilp_bench all [SECONDS]    both (default; SECONDS defaults to 60)

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/full_ilp.hpp"
#include "partition/planner.hpp"
#include "schedule/ilp_schedule.hpp"
#include "schedule/search.hpp"
#include "solver/solve.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace madpipe;

static Profile shipped(const std::string& name) {
  return read_profile(std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json");
}

static Platform platform_of(int gpus, double memory_gib) {
  Platform platform;
  platform.gpus = gpus;
  platform.memory_bytes = static_cast<std::int64_t>(memory_gib * 1024 * 1024 * 1024);
  platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
  return platform;
}

static std::string ms_or_dash(double ms, bool present) {
  if (!present) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ms);
  return text;
}

static void full_ilp_bench(double seconds) {
  Profile profile = shipped("resnet50");
  profile.layers.resize(12);
  profile.name = "resnet50[0..11]";
  const ChainCosts costs(profile);
  std::printf("== full ILP (thesis ch. 6), %s, P = 4, 12 GB/s, CBC, time limit %.0f s\n",
              profile.name.c_str(), seconds);
  std::printf("%-8s %-6s %10s %10s %10s %10s %9s %12s %10s %9s %12s\n", "memory", "start",
              "madpipe", "madpipe k=1", "ilp", "bound", "gap", "first sol s", "solve s", "status",
              "ilp/madpipe");
  for (double gib : {8.0, 12.0, 24.0}) {
    const Platform platform = platform_of(4, gib);
    partition::PlannerOptions options;
    const partition::PlanResult madpipe = partition::make_plan(profile, platform, options);
    options.max_k = 1;
    const partition::PlanResult one_periodic = partition::make_plan(profile, platform, options);
    for (bool warm : {false, true}) {
      partition::FullIlpOptions ilp;
      ilp.solve.time_limit_s = seconds;
      ilp.period_lower_bound_ms = partition::lower_bound_period_ms(costs, platform);
      if (warm && one_periodic.feasible)
        ilp.warm_start =
            partition::ScheduledStages{one_periodic.plan.stages, one_periodic.plan.pattern};
      const partition::FullIlpResult result = partition::full_ilp(costs, platform, ilp);
      const double period = result.plan ? result.plan->pattern.period_ms : 0;
      std::printf(
          "%-8s %-6s %10s %10s %10s %10.2f %8.1f%% %12s %10.1f %9s %12s\n",
          (std::to_string(static_cast<int>(gib)) + "GiB").c_str(), warm ? "warm" : "cold",
          ms_or_dash(madpipe.plan.predicted.period_ms, madpipe.feasible).c_str(),
          ms_or_dash(one_periodic.plan.predicted.period_ms, one_periodic.feasible).c_str(),
          ms_or_dash(period, result.plan.has_value()).c_str(), result.solve.bound,
          100 * result.solve.gap,
          result.solve.first_solution_seconds >= 0
              ? std::to_string(result.solve.first_solution_seconds).substr(0, 6).c_str()
              : "-",
          result.solve.seconds, std::string(solver::to_string(result.solve.status)).c_str(),
          result.plan && madpipe.feasible
              ? std::to_string(period / madpipe.plan.predicted.period_ms).substr(0, 5).c_str()
              : "-");
      std::fflush(stdout);
    }
  }
}

static void stage_ilp_bench(double seconds) {
  std::printf(
      "\n== stage-level ILP (thesis ch. 7.2) on MadPipe's allocation, 12 GB/s, CBC, time "
      "limit %.0f s\n",
      seconds);
  std::printf("%-11s %2s %7s %7s %12s %10s %10s %9s %8s %9s\n", "profile", "P", "memory", "stages",
              "heuristic", "heur. k=1", "ilp", "status", "solve s", "ilp/heur");
  for (const std::string name : {"resnet50", "gpt2_small", "gpt2_xl16"}) {
    const Profile profile = shipped(name);
    for (int gpus : {4, 8}) {
      for (double gib : {6.0, 16.0, 40.0}) {
        const Platform platform = platform_of(gpus, gib);
        partition::PlannerOptions options;
        options.scheduler = partition::Scheduler::Heuristic;
        const partition::PlanResult heuristic = partition::make_plan(profile, platform, options);
        if (!heuristic.feasible) {
          std::printf("%-11s %2d %6.0fG %7s %12s\n", name.c_str(), gpus, gib, "-", "does not fit");
          continue;
        }
        const auto& stages = heuristic.plan.stages;
        schedule::ScheduleSearchOptions one;
        one.max_k = 1;
        const auto one_periodic = schedule::schedule_under_memory(stages, platform, one);
        schedule::IlpScheduleOptions ilp;
        ilp.solve.time_limit_s = seconds;
        ilp.period_upper_bound_ms = heuristic.plan.predicted.period_ms;
        if (one_periodic) ilp.warm_start = one_periodic->pattern;
        const schedule::IlpScheduleResult result = schedule::ilp_schedule(stages, platform, ilp);
        const double best =
            result.pattern ? result.pattern->period_ms : heuristic.plan.predicted.period_ms;
        std::printf(
            "%-11s %2d %6.0fG %7zu %12.2f %10s %10s %9s %8.1f %9.4f\n", name.c_str(), gpus, gib,
            stages.size(), heuristic.plan.predicted.period_ms,
            ms_or_dash(one_periodic ? one_periodic->pattern.period_ms : 0, one_periodic.has_value())
                .c_str(),
            ms_or_dash(result.pattern ? result.pattern->period_ms : 0, result.pattern.has_value())
                .c_str(),
            std::string(solver::to_string(result.solve.status)).c_str(), result.solve.seconds,
            best / heuristic.plan.predicted.period_ms);
        std::fflush(stdout);
      }
    }
  }
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 60;
  if (solver::built_backends().empty()) {
    std::printf("no MILP backend built\n");
    return 0;
  }
  if (what == "full" || what == "all") full_ilp_bench(seconds);
  if (what == "stage" || what == "all") stage_ilp_bench(seconds);
  return 0;
}
