// Rematerialization benchmarks (thesis ch. 2), printed as tables with ratios; nothing is asserted.
//
//   remat_bench dp        ROTOR DP time with 500 slots on synthetic chains of 67 and 339 stages
//   remat_bench overhead  ResNet-50: time overhead of optimal remat at 1/2, 1/3, 1/4 of the
//                         no-remat memory, against checkpointing every sqrt(L) layers and the
//                         best uniform segmentation at the same memory
//   remat_bench planner   ResNet-50 on 4 GPUs with tight memory: period with and without remat
//   remat_bench all       everything (default)

#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/planner.hpp"
#include "remat/remat_chain.hpp"
#include "remat/rotor.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

using namespace madpipe;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

static Profile shipped(const std::string& name) {
  return read_profile(std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json");
}

// ResNet-like chain: activation sizes and times vary per stage.
static remat::RematChain synthetic_chain(int stages, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> size(20'000'000, 400'000'000);
  std::uniform_real_distribution<double> ms(0.5, 4.0);
  remat::RematChain chain = remat::make_remat_chain(stages);
  chain.a[0] = chain.abar[0] = chain.delta[0] = size(rng);
  for (int k = 1; k <= stages; ++k) {
    chain.forward_ms[k] = ms(rng);
    chain.backward_ms[k] = 2 * chain.forward_ms[k];
    chain.a[k] = chain.delta[k] = size(rng);
    chain.abar[k] = chain.a[k] + 2 * size(rng);
    chain.forward_overhead[k] = size(rng) / 8;
    chain.backward_overhead[k] = size(rng) / 4;
  }
  return chain;
}

static void bench_dp() {
  std::printf("ROTOR persistent DP, 500 slots, budget = 1/3 of the store-all peak\n");
  std::printf("%8s %12s %12s %14s\n", "stages", "DP seconds", "overhead", "sequence ops");
  for (int stages : {67, 339}) {
    const remat::RematChain chain = synthetic_chain(stages, 3);
    const std::int64_t all =
        remat::replay_sequence(chain, remat::store_all_sequence(chain)).peak_bytes;
    const auto start = Clock::now();
    const remat::RematResult result = remat::optimal_remat(chain, all / 3, 500);
    const double seconds = seconds_since(start);
    std::printf(
        "%8d %12.3f %11.1f%% %14zu\n", stages, seconds,
        result.feasible ? 100 * (result.replay.total_ms() / chain.sequential_ms() - 1) : -1.0,
        result.sequence.size());
  }
  std::printf("\n");
}

static void bench_overhead() {
  const Profile profile = shipped("resnet50");
  const int layers = static_cast<int>(profile.layers.size());
  const remat::RematChain chain = remat::stage_remat_chain(profile, 0, layers - 1);
  const remat::SequenceReplay all = remat::replay_sequence(chain, remat::store_all_sequence(chain));
  const int sqrt_segments = static_cast<int>(std::lround(std::sqrt(layers)));
  const remat::SequenceReplay sqrt_l =
      remat::replay_sequence(chain, remat::sequential_checkpoint_sequence(chain, sqrt_segments));
  std::printf("ResNet-50 (%d layers, batch %d): no remat %s, peak %s\n", layers, profile.batch,
              format_ms(all.total_ms()).c_str(), format_bytes(all.peak_bytes).c_str());
  std::printf("checkpointing every sqrt(L) layers (%d segments): overhead %.1f%%, peak %s\n\n",
              sqrt_segments, 100 * (sqrt_l.total_ms() / all.total_ms() - 1),
              format_bytes(sqrt_l.peak_bytes).c_str());
  std::printf("%8s %10s | %9s %10s | %9s %10s | %9s %10s %9s | %s\n", "memory", "budget", "rotor",
              "peak", "sqrt(L)", "peak", "best seg", "segments", "peak", "rotor / best seg time");
  double ratio_sum = 0;
  int ratio_count = 0;
  for (int divisor : {2, 3, 4}) {
    const std::int64_t budget = all.peak_bytes / divisor;
    const remat::RematResult rotor = remat::optimal_remat(chain, budget, 500);
    // Best uniform segmentation that fits the same budget.
    double best_time = -1;
    int best_segments = 0;
    std::int64_t best_peak = 0;
    for (int segments = 1; segments <= 2 * layers; ++segments) {
      const remat::SequenceReplay r =
          remat::replay_sequence(chain, remat::sequential_checkpoint_sequence(chain, segments));
      if (!r.valid || r.peak_bytes > budget) continue;
      if (best_time < 0 || r.total_ms() < best_time) {
        best_time = r.total_ms();
        best_segments = segments;
        best_peak = r.peak_bytes;
      }
    }
    const bool sqrt_fits = sqrt_l.peak_bytes <= budget;
    char sqrt_text[32], best_text[32], rotor_text[32];
    std::snprintf(rotor_text, sizeof rotor_text, "%.1f%%",
                  rotor.feasible ? 100 * (rotor.replay.total_ms() / all.total_ms() - 1) : 0.0);
    std::snprintf(sqrt_text, sizeof sqrt_text, "%.1f%%",
                  100 * (sqrt_l.total_ms() / all.total_ms() - 1));
    std::snprintf(best_text, sizeof best_text, "%.1f%%", 100 * (best_time / all.total_ms() - 1));
    std::printf(
        "%5s1/%d %10s | %9s %10s | %9s %10s | %9s %10d %9s | %s\n", "", divisor,
        format_bytes(budget).c_str(), rotor.feasible ? rotor_text : "no fit",
        rotor.feasible ? format_bytes(rotor.replay.peak_bytes).c_str() : "-",
        sqrt_fits ? sqrt_text : "no fit", sqrt_fits ? format_bytes(sqrt_l.peak_bytes).c_str() : "-",
        best_time > 0 ? best_text : "no fit", best_segments,
        best_time > 0 ? format_bytes(best_peak).c_str() : "-",
        rotor.feasible && best_time > 0
            ? (std::to_string(rotor.replay.total_ms() / best_time).substr(0, 5) + " (" +
               std::to_string(100 * (best_time / rotor.replay.total_ms() - 1)).substr(0, 4) +
               "% faster)")
                  .c_str()
            : "-");
    if (rotor.feasible && best_time > 0) {
      ratio_sum += best_time / rotor.replay.total_ms() - 1;
      ++ratio_count;
    }
  }
  if (ratio_count > 0)
    std::printf("ROTOR is %.1f%% faster than the best segmentation on average\n",
                100 * ratio_sum / ratio_count);
  // At exactly the memory sqrt(L) checkpointing needs (the thesis' comparison).
  const remat::RematResult same = remat::optimal_remat(chain, sqrt_l.peak_bytes, 500);
  if (same.feasible)
    std::printf(
        "at the sqrt(L) memory (%s): rotor overhead %.1f%% vs %.1f%%, rotor %.1f%% faster\n",
        format_bytes(sqrt_l.peak_bytes).c_str(),
        100 * (same.replay.total_ms() / all.total_ms() - 1),
        100 * (sqrt_l.total_ms() / all.total_ms() - 1),
        100 * (sqrt_l.total_ms() / same.replay.total_ms() - 1));
  // Smallest budget ROTOR can work with (within 1%).
  std::int64_t lo = 0, hi = all.peak_bytes;
  while (hi - lo > all.peak_bytes / 100) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (remat::optimal_remat(chain, mid, 500).feasible ? hi : lo) = mid;
  }
  const remat::RematResult smallest = remat::optimal_remat(chain, hi, 500);
  std::printf("smallest memory rotor fits: %s (1/%.1f of no remat), overhead %.1f%%\n\n",
              format_bytes(hi).c_str(), static_cast<double>(all.peak_bytes) / hi,
              100 * (smallest.replay.total_ms() / all.total_ms() - 1));
}

static void bench_planner() {
  const Profile profile = shipped("resnet50");
  std::printf("Planner, ResNet-50 on 4 GPUs at 12 GB/s, madpipe, heuristic scheduler\n");
  std::printf("%8s %14s %14s %10s %12s %12s\n", "memory", "no remat", "remat", "ratio", "seconds",
              "remat stages");
  for (double gib : {12.0, 8.0, 6.0, 5.0, 4.5}) {
    Platform platform;
    platform.gpus = 4;
    platform.memory_bytes = static_cast<std::int64_t>(gib * 1024 * 1024 * 1024);
    platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s");
    partition::PlannerOptions options;
    options.scheduler = partition::Scheduler::Heuristic;
    const partition::PlanResult plain = partition::make_plan(profile, platform, options);
    options.remat.remat = madpipe::partition::RematStrategy::Rotor;
    const auto start = Clock::now();
    const partition::PlanResult remat = partition::make_plan(profile, platform, options);
    const double seconds = seconds_since(start);
    int stages = 0;
    if (remat.feasible)
      for (const auto& stage : remat.plan.stages)
        stages += stage.remat != madpipe::schedule::RematStrategy::None;
    const std::string plain_text =
        plain.feasible ? format_ms(plain.plan.predicted.period_ms) : "no plan";
    const std::string remat_text =
        remat.feasible ? format_ms(remat.plan.predicted.period_ms) : "no plan";
    std::printf(
        "%5.1fGiB %14s %14s %10s %12.2f %12d\n", gib, plain_text.c_str(), remat_text.c_str(),
        plain.feasible && remat.feasible
            ? std::to_string(remat.plan.predicted.period_ms / plain.plan.predicted.period_ms)
                  .substr(0, 5)
                  .c_str()
            : "-",
        seconds, stages);
  }
  std::printf("\n");
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  if (what != "all" && what != "dp" && what != "overhead" && what != "planner") {
    std::fprintf(stderr, "usage: remat_bench [dp|overhead|planner|all]\n");
    return 2;
  }
  if (what == "all" || what == "dp") bench_dp();
  if (what == "all" || what == "overhead") bench_overhead();
  if (what == "all" || what == "planner") bench_planner();
  return 0;
}
