// Planner benchmarks: where the time of `madpipe plan` goes (phases, on every shipped profile and
// on long chains, feasible and infeasible memories), MadPipe-DP running time (against L, P and
// the discretization) and the periods of every algorithm on the shipped profiles over a memory
// sweep, as ratios.
//
//   planner_bench [phases [FILTER [SECONDS]]|dp|compare|all]
//
// FILTER keeps the phase cases whose label contains it ("densenet121/P2", "" for all); SECONDS
// is the request's time limit (default: the madpipe command's, "inf" for none).

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/infeasible.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planner.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace madpipe;

static Profile shipped(const std::string& name) {
  return read_profile(std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json");
}

// A heterogeneous chain of `layers` layers made by joining the shipped profiles end to end.
static Profile joined_chain(int layers) {
  const std::vector<Profile> parts{shipped("resnet50"), shipped("gpt2_xl16"),
                                   shipped("gpt2_small")};
  Profile chain = parts[0];
  chain.name = "joined" + std::to_string(layers);
  chain.layers.clear();
  for (int i = 0; static_cast<int>(chain.layers.size()) < layers; ++i) {
    const Profile& part = parts[i % parts.size()];
    for (const Layer& layer : part.layers) {
      if (static_cast<int>(chain.layers.size()) == layers) break;
      chain.layers.push_back(layer);
    }
  }
  return chain;
}

static double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Time of MadPipe's first phase as the planner runs it: the contiguous DP's bound, then
// Algorithm 8 (at most K MadPipe-DP runs); best of 3.
static double time_algorithm8(const Profile& profile, const Platform& platform,
                              partition::Discretization d, std::size_t* allocations,
                              bool extra_targets = false) {
  if (!extra_targets) d.extra_targets = 0;
  const ChainCosts costs(profile);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const double bound = partition::contiguous_upper_bound(costs, platform, d);
    const auto found = partition::madpipe_allocations(costs, platform, d, true, {}, bound);
    best = std::min(best, seconds_since(start));
    *allocations = found.size();
  }
  return best;
}

static Platform platform_for(const Profile& profile, int gpus, double memory_fraction) {
  const ChainCosts costs(profile);
  Platform platform;
  platform.gpus = gpus;
  platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
  platform.weight_copies = 3;
  const double everything = 3.0 * costs.weight_bytes(0, costs.num_layers() - 1) +
                            costs.stored_bytes(0, costs.num_layers() - 1);
  platform.memory_bytes = static_cast<std::int64_t>(everything * memory_fraction);
  return platform;
}

static void bench_dp() {
  std::printf("== MadPipe first phase (contiguous bound + Algorithm 8), one core, best of 3 ==\n");
  std::printf(
      "memory per GPU = 40%% of the whole model's weights + activations of one micro-batch\n");
  std::printf("%-8s %4s %-14s %10s %12s %14s\n", "layers", "P", "grid t/V/m", "seconds",
              "allocations", "+8 targets (s)");
  const partition::Discretization thesis;
  for (int layers : {17, 34, 67, 134, 339}) {
    const Profile chain = joined_chain(layers);
    std::size_t found = 0, more = 0;
    const double s = time_algorithm8(chain, platform_for(chain, 8, 0.4), thesis, &found);
    const double e = time_algorithm8(chain, platform_for(chain, 8, 0.4), thesis, &more, true);
    std::printf("%-8d %4d %-14s %10.3f %12zu %14.3f\n", layers, 8, "101/51/11", s, found, e);
  }
  const Profile chain67 = joined_chain(67);
  for (int gpus : {2, 4, 8, 16}) {
    std::size_t found = 0;
    const double s =
        time_algorithm8(chain67, platform_for(chain67, gpus, 0.8 / gpus * 4), thesis, &found);
    std::printf("%-8d %4d %-14s %10.3f %12zu\n", 67, gpus, "101/51/11", s, found);
  }
  struct Grid {
    int t, v, m;
  };
  for (const Grid g :
       {Grid{51, 26, 6}, Grid{101, 51, 11}, Grid{201, 101, 21}, Grid{401, 201, 41}}) {
    partition::Discretization d;
    d.time_steps = g.t;
    d.delay_steps = g.v;
    d.memory_steps = g.m;
    std::size_t found = 0;
    const double s = time_algorithm8(chain67, platform_for(chain67, 8, 0.4), d, &found);
    const std::string label =
        std::to_string(g.t) + "/" + std::to_string(g.v) + "/" + std::to_string(g.m);
    std::printf("%-8d %4d %-14s %10.3f %12zu\n", 67, 8, label.c_str(), s, found);
  }
}

static std::string cell(double value, const char* format) {
  if (value < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

static void bench_compare() {
  const auto& algorithms = partition::all_algorithms();
  std::printf("\n== normalized period per algorithm (ms per micro-batch, '-' = does not fit) ==\n");
  std::printf("bandwidth 12GB/s, C = 3; ratio = period / madpipe period; lb = lower bound\n");
  std::printf("%-10s %2s %6s |", "profile", "P", "memory");
  for (auto a : algorithms) std::printf(" %10s", partition::to_string(a));
  std::printf(" |");
  for (std::size_t a = 1; a < algorithms.size(); ++a)
    std::printf(" %10s", partition::to_string(algorithms[a]));
  std::printf(" | %6s %7s\n", "mp/lb", "mp (s)");
  struct Sweep {
    const char* profile;
    std::vector<const char*> memories;
  };
  const std::vector<Sweep> sweeps{
      {"resnet50", {"4GiB", "6GiB", "8GiB", "12GiB", "16GiB", "24GiB", "32GiB"}},
      {"gpt2_small", {"3GiB", "4GiB", "6GiB", "8GiB", "16GiB"}},
      {"gpt2_xl16", {"6GiB", "8GiB", "12GiB", "16GiB", "32GiB"}},
  };
  for (const Sweep& sweep : sweeps) {
    const Profile profile = shipped(sweep.profile);
    for (int gpus : {2, 4, 8}) {
      for (const char* memory : sweep.memories) {
        Platform platform;
        platform.gpus = gpus;
        platform.memory_bytes = parse_bytes(memory);
        platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
        std::vector<double> period;
        double madpipe_seconds = 0;
        for (partition::Algorithm algorithm : algorithms) {
          partition::PlannerOptions options;
          options.algorithm = algorithm;
          const auto result = partition::make_plan(profile, platform, options);
          period.push_back(result.feasible ? result.plan.predicted.period_ms : -1);
          if (algorithm == partition::Algorithm::MadPipe) madpipe_seconds = result.planning_seconds;
        }
        const double lb = partition::lower_bound_period_ms(profile, platform);
        std::printf("%-10s %2d %6s |", sweep.profile, gpus, memory);
        for (double p : period) std::printf(" %10s", cell(p, "%.2f").c_str());
        std::printf(" |");
        for (std::size_t a = 1; a < period.size(); ++a)
          std::printf(
              " %10s",
              cell(period[0] > 0 && period[a] > 0 ? period[a] / period[0] : -1, "%.3f").c_str());
        std::printf(" | %6s %7.2f\n", cell(period[0] > 0 ? period[0] / lb : -1, "%.2f").c_str(),
                    madpipe_seconds);
      }
    }
  }
}

// What one GPU must hold for the whole model with one micro-batch in flight, split over P GPUs:
// no plan fits in less than this (weights C times, what a micro-batch keeps), nor in less than
// the largest layer alone.
static double memory_lower_bound(const ChainCosts& costs, const Platform& platform) {
  double largest = 0;
  for (int l = 0; l < costs.num_layers(); ++l)
    largest = std::max(largest,
                       static_cast<double>(platform.weight_copies * costs.weight_bytes(l, l) +
                                           costs.stored_bytes(l, l) + costs.workspace_bytes(l, l)));
  const int last = costs.num_layers() - 1;
  const double spread = static_cast<double>(platform.weight_copies * costs.weight_bytes(0, last) +
                                            costs.stored_bytes(0, last)) /
                        platform.gpus;
  return std::max(largest, spread);
}

// One `madpipe plan` request with the default options, as the command runs it: plan, and when
// nothing fits, explain what would.
static void bench_phases(const std::string& filter, double time_limit_s) {
  std::printf("== where the time of a default plan request goes (seconds, one core) ==\n");
  std::printf("time limit %g s (madpipe plan --time-limit)\n", time_limit_s);
  std::printf(
      "bandwidth 12GB/s, C = 3; feasible: 2x, infeasible: 0.9x the memory no plan can go below\n");
  std::printf(
      "(max(largest layer, (3W + one micro-batch of activations) / P)); explain = the search for "
      "the\n");
  std::printf("smallest memory that fits, which an infeasible request runs after planning\n");
  const std::vector<std::string> phases{"contiguous-dp", "madpipe-dp", "baselines",
                                        "schedule",      "refine",     "stage-ilp"};
  std::printf("%-24s %8s %-8s %9s", "case", "memory", "status", "period");
  for (const std::string& phase : phases) std::printf(" %13s", phase.c_str());
  std::printf(" %9s %9s\n", "explain", "total");
  struct Chain {
    std::string label;
    Profile profile;
  };
  std::vector<Chain> chains;
  for (const char* name : {"resnet50", "gpt2_small", "gpt2_xl16", "densenet121"})
    chains.push_back({name, shipped(name)});
  for (int layers : {134, 200})
    chains.push_back({"joined" + std::to_string(layers), joined_chain(layers)});
  double worst_feasible = 0, worst_infeasible = 0;
  for (const Chain& chain : chains) {
    const ChainCosts costs(chain.profile);
    for (int gpus : {2, 4, 8, 16}) {
      for (bool feasible : {true, false}) {
        const std::string label = chain.label + "/P" + std::to_string(gpus) + "/" +
                                  (feasible ? "feasible" : "infeasible");
        if (label.find(filter) == std::string::npos) continue;
        Platform platform;
        platform.gpus = gpus;
        platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
        platform.memory_bytes =
            static_cast<std::int64_t>((feasible ? 2.0 : 0.9) * memory_lower_bound(costs, platform));
        const auto start = std::chrono::steady_clock::now();
        partition::PlannerOptions options;
        options.time_limit_s = time_limit_s;
        options.milp.time_limit_s = time_limit_s;
        const partition::PlanResult result = partition::make_plan(chain.profile, platform, options);
        double explain = 0;
        if (!result.feasible) {
          const auto explain_start = std::chrono::steady_clock::now();
          options.time_limit_s = std::max(0.0, time_limit_s - result.planning_seconds);
          partition::explain_infeasible(result.reason, chain.profile, platform, options);
          explain = seconds_since(explain_start);
        }
        const double total = seconds_since(start);
        (feasible ? worst_feasible : worst_infeasible) =
            std::max(feasible ? worst_feasible : worst_infeasible, total);
        std::map<std::string, double> seconds;
        for (const partition::PhaseTime& phase : result.phases)
          seconds[phase.phase] += phase.seconds;
        std::printf("%-24s %8s %-8s %9s", label.c_str(),
                    format_bytes(static_cast<double>(platform.memory_bytes)).c_str(),
                    result.feasible ? "plan" : "none",
                    result.feasible ? cell(result.plan.predicted.period_ms, "%.2f").c_str() : "-");
        for (const std::string& phase : phases)
          std::printf(" %13s", seconds.count(phase) ? cell(seconds[phase], "%.3f").c_str() : "-");
        std::printf(" %9s %9.3f%s\n", result.feasible ? "-" : cell(explain, "%.3f").c_str(), total,
                    result.cut_by_time_limit ? "  cut" : "");
      }
    }
  }
  std::printf("worst total: feasible %.3f s, infeasible %.3f s\n", worst_feasible,
              worst_infeasible);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what == "phases" || what == "all")
    bench_phases(argc > 2 ? argv[2] : "",
                 argc > 3 ? std::stod(argv[3]) : partition::kCommandTimeLimitS);
  if (what == "dp" || what == "all") bench_dp();
  if (what == "compare" || what == "all") bench_compare();
  return 0;
}
