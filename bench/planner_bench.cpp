// Planner benchmarks: MadPipe-DP running time (against L, P and the discretization) and the
// periods of every algorithm on the shipped profiles over a memory sweep, as ratios.
//
//   planner_bench [dp|compare|all]

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/chain.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planner.hpp"

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

// Time of Algorithm 8 (K DP runs), best of 3.
static double time_algorithm8(const Profile& profile, const Platform& platform,
                              const partition::Discretization& d, std::size_t* allocations) {
  const ChainCosts costs(profile);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    const auto found = partition::madpipe_allocations(costs, platform, d, true);
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
  std::printf("== MadPipe-DP (Algorithm 8, K DP runs), one core, best of 3 ==\n");
  std::printf("memory per GPU = 40%% of the whole model's weights + activations of one micro-batch\n");
  std::printf("%-8s %4s %-14s %10s %12s\n", "layers", "P", "grid t/V/m", "seconds", "allocations");
  const partition::Discretization thesis;
  for (int layers : {17, 34, 67, 134, 339}) {
    const Profile chain = joined_chain(layers);
    std::size_t found = 0;
    const double s = time_algorithm8(chain, platform_for(chain, 8, 0.4), thesis, &found);
    std::printf("%-8d %4d %-14s %10.3f %12zu\n", layers, 8, "101/51/11", s, found);
  }
  const Profile chain67 = joined_chain(67);
  for (int gpus : {2, 4, 8, 16}) {
    std::size_t found = 0;
    const double s = time_algorithm8(chain67, platform_for(chain67, gpus, 0.8 / gpus * 4), thesis,
                                     &found);
    std::printf("%-8d %4d %-14s %10.3f %12zu\n", 67, gpus, "101/51/11", s, found);
  }
  struct Grid {
    int t, v, m;
  };
  for (const Grid g : {Grid{51, 26, 6}, Grid{101, 51, 11}, Grid{201, 101, 21}, Grid{401, 201, 41}}) {
    partition::Discretization d;
    d.time_steps = g.t;
    d.delay_steps = g.v;
    d.memory_steps = g.m;
    std::size_t found = 0;
    const double s = time_algorithm8(chain67, platform_for(chain67, 8, 0.4), d, &found);
    const std::string label = std::to_string(g.t) + "/" + std::to_string(g.v) + "/" + std::to_string(g.m);
    std::printf("%-8d %4d %-14s %10.3f %12zu\n", 67, 8, label.c_str(), s, found);
  }
}

static void bench_compare() {
  std::printf("\n== normalized period per algorithm (ms per micro-batch); ratio = period / madpipe ==\n");
  std::printf("bandwidth 12GB/s, C = 3; lb = max(sum U / P, max layer U)\n");
  std::printf("%-11s %2s %9s | %9s %9s %9s %9s | %7s %7s %7s | %6s\n", "profile", "P", "memory",
              "madpipe", "contig", "1f1b", "gpipe", "contig", "1f1b", "gpipe", "mp/lb");
  struct Sweep {
    const char* profile;
    std::vector<const char*> memories;
  };
  const std::vector<Sweep> sweeps{
      {"resnet50", {"4GiB", "6GiB", "8GiB", "12GiB", "16GiB", "24GiB", "32GiB"}},
      {"gpt2_small", {"2GiB", "3GiB", "4GiB", "6GiB", "8GiB", "16GiB"}},
      {"gpt2_xl16", {"8GiB", "12GiB", "16GiB", "24GiB", "32GiB", "48GiB"}},
  };
  for (const Sweep& sweep : sweeps) {
    const Profile profile = shipped(sweep.profile);
    for (int gpus : {2, 4, 8}) {
      for (const char* memory : sweep.memories) {
        Platform platform;
        platform.gpus = gpus;
        platform.memory_bytes = parse_bytes(memory);
        platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
        double period[4];
        int a = 0;
        for (partition::Algorithm algorithm : partition::all_algorithms()) {
          partition::PlannerOptions options;
          options.algorithm = algorithm;
          const auto result = partition::make_plan(profile, platform, options);
          period[a++] = result.feasible ? result.plan.predicted.period_ms : -1;
        }
        auto cell = [](double v) {
          char buf[32];
          if (v < 0) return std::string("-");
          std::snprintf(buf, sizeof buf, "%.2f", v);
          return std::string(buf);
        };
        auto ratio = [&](double v) {
          char buf[32];
          if (v < 0 || period[0] < 0) return std::string("-");
          std::snprintf(buf, sizeof buf, "%.3f", v / period[0]);
          return std::string(buf);
        };
        const double lb = partition::lower_bound_period_ms(profile, platform);
        std::printf("%-11s %2d %9s | %9s %9s %9s %9s | %7s %7s %7s | %6s\n", sweep.profile, gpus,
                    memory, cell(period[0]).c_str(), cell(period[1]).c_str(),
                    cell(period[2]).c_str(), cell(period[3]).c_str(), ratio(period[1]).c_str(),
                    ratio(period[2]).c_str(), ratio(period[3]).c_str(),
                    period[0] < 0 ? "-" : cell(period[0] / lb).c_str());
      }
    }
  }
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what == "dp" || what == "all") bench_dp();
  if (what == "compare" || what == "all") bench_compare();
  return 0;
}
