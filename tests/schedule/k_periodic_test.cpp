// k-periodic patterns (thesis ch. 5.2.2): drop_every_kth_plus_one and Theorem 16.

#include "schedule/k_periodic.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/validate.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/pattern.hpp"
#include "schedule/search.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;

namespace {

madpipe::Platform platform_of(int gpus, std::int64_t memory = mt::kHugeMemory,
                              double bandwidth = 5e7) {
  return mt::make_platform(gpus, memory, bandwidth, 1);
}

// Checks the structure, validity, NCA and simulated period of the k-periodic variant of `base`.
void check_variant(const std::vector<ms::Stage>& stages, const madpipe::Platform& platform,
                   const ms::Pattern& base, int k) {
  const ms::Pattern out = ms::drop_every_kth_plus_one(base, k);
  EXPECT_EQ(out.k, k);
  EXPECT_NEAR(out.period_ms, (k + 1) * base.period_ms, 1e-9 * out.period_ms);
  EXPECT_NEAR(out.normalized_period_ms(), (k + 1.0) / k * base.period_ms, 1e-9 * out.period_ms);
  EXPECT_EQ(out.ops.size(), k * base.ops.size());
  // Every op of the base pattern appears k times, covering every residue mod k once.
  std::map<std::pair<int, int>, std::set<int>> residues;
  std::map<std::pair<int, int>, int> count;
  for (const ms::Op& op : out.ops) {
    EXPECT_GE(op.start_ms, 0.0);
    EXPECT_LT(op.start_ms, out.period_ms);
    const std::pair<int, int> key{op.stage, static_cast<int>(op.kind)};
    residues[key].insert(((op.shift % k) + k) % k);
    ++count[key];
  }
  std::set<int> all;
  for (int r = 0; r < k; ++r) all.insert(r);
  for (const ms::Op& op : base.ops) {
    const std::pair<int, int> key{op.stage, static_cast<int>(op.kind)};
    EXPECT_EQ(count[key], k) << ms::op_token(op.kind, op.stage);
    EXPECT_EQ(residues[key], all) << ms::op_token(op.kind, op.stage);
  }
  const auto violations = mplan::validate(mt::plan_of(stages, platform, out));
  EXPECT_TRUE(violations.empty()) << "k " << k << "\n" << mt::describe(violations);
  // Dropping micro-batches never adds one in flight, and removes one wherever a stage had k + 1
  // or more (any k + 1 consecutive micro-batches include a dropped one).
  const int n = static_cast<int>(stages.size());
  const auto before = ms::concurrent_activations(base, n);
  const auto after = ms::concurrent_activations(out, n);
  for (int s = 0; s < n; ++s) {
    EXPECT_LE(after[s], before[s]) << "stage " << s << " k " << k;
    if (before[s] >= k + 1) {
      EXPECT_LT(after[s], before[s]) << "stage " << s << " k " << k;
    }
    EXPECT_GE(after[s], 1);
  }
  // Running it gives k micro-batches per (k + 1) T.
  const mplan::SimResult sim = mplan::simulate(mt::plan_of(stages, platform, out));
  EXPECT_NEAR(sim.steady_period_ms, out.period_ms, 1e-6 * out.period_ms);
  EXPECT_NEAR(sim.steady_normalized_ms, out.normalized_period_ms(), 1e-6 * out.period_ms);
}

}  // namespace

TEST(DropEveryKthPlusOne, KeepsKCopiesOfEachOpAndStaysValidFor1F1BStar) {
  std::mt19937 rng(16);
  for (int trial = 0; trial < 12; ++trial) {
    const int n = 2 + trial % 5;
    const auto stages = mt::random_stages(rng, n, n, n, true);
    const auto platform = platform_of(n);
    const auto resources = ms::pipeline_resources(stages, platform);
    const double lo = mt::max_load(resources);
    // At the busiest load 1F1B* has many groups, so stage 0 keeps many micro-batches.
    for (double factor : {1.0, 1.4}) {
      const auto base = ms::one_f_one_b_star(stages, platform, lo * factor);
      ASSERT_TRUE(base.has_value());
      for (int k = 2; k <= 4; ++k) {
        SCOPED_TRACE("trial " + std::to_string(trial) + " k " + std::to_string(k));
        check_variant(stages, platform, *base, k);
      }
    }
  }
}

TEST(DropEveryKthPlusOne, KeepsKCopiesOfEachOpAndStaysValidForModuloPatterns) {
  std::mt19937 rng(61);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const int layers = 3 + trial % 6;
    const int gpus = 2 + trial % 3;
    const int n = 2 + static_cast<int>(rng() % (layers - 1));
    const auto stages = mt::random_stages(rng, layers, n, gpus, false);
    const auto platform = platform_of(gpus);
    const auto base =
        ms::modulo_schedule(stages, platform, 1.3 * mt::busiest_load(stages, platform));
    if (!base) continue;
    for (int k = 2; k <= 3; ++k) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " k " + std::to_string(k));
      check_variant(stages, platform, *base, k);
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

TEST(DropEveryKthPlusOne, HomogeneousPipelineNca) {
  // Four stages f = b = 1 without idle time: 1F1B*(2) keeps 4,3,2,1 micro-batches. Dropping
  // every third micro-batch (k = 2) leaves at most two of any three consecutive ones.
  const auto stages = mt::chain_stages({1, 1, 1, 1}, {1, 1, 1, 1});
  const auto platform = platform_of(4, mt::kHugeMemory, 1e12);
  const auto base = ms::one_f_one_b_star(stages, platform, 2.0);
  ASSERT_TRUE(base.has_value());
  EXPECT_EQ(ms::concurrent_activations(*base, 4), (std::vector<int>{4, 3, 2, 1}));
  const ms::Pattern k2 = ms::drop_every_kth_plus_one(*base, 2);
  EXPECT_EQ(ms::concurrent_activations(k2, 4), (std::vector<int>{3, 2, 2, 1}));
  const ms::Pattern k3 = ms::drop_every_kth_plus_one(*base, 3);
  EXPECT_EQ(ms::concurrent_activations(k3, 4), (std::vector<int>{3, 3, 2, 1}));
  EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, k2)).empty());
  EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, k3)).empty());
}

TEST(DropEveryKthPlusOne, KOneIsTheInputAndBadInputsThrow) {
  std::mt19937 rng(3);
  const auto stages = mt::random_stages(rng, 3, 3, 3, true);
  const auto platform = platform_of(3);
  const auto base = ms::one_f_one_b_star(stages, platform, 1e4);
  ASSERT_TRUE(base.has_value());
  // k = 1 keeps the 1-periodic pattern itself (dropping every second micro-batch would only
  // double the period).
  EXPECT_EQ(ms::drop_every_kth_plus_one(*base, 1), *base);
  EXPECT_THROW(ms::drop_every_kth_plus_one(*base, 0), madpipe::Error);
  const ms::Pattern two = ms::drop_every_kth_plus_one(*base, 2);
  EXPECT_THROW(ms::drop_every_kth_plus_one(two, 2), madpipe::Error);  // input must be 1-periodic
}

// ---------------------------------------------------------------------------------------------
// Theorem 16: k-periodic patterns are sometimes needed. k + 1 one-layer stages on k + 1 GPUs,
// u_F = u_B = 1, a = 1, W_0 = 1, W_l = l, memory k + 1, one weight copy: stage l can keep at
// most k + 1 - l micro-batches (stage 0 at most k). The best k-periodic pattern has normalized
// period 2 (1 + 1/k); no j-periodic pattern with j < k does better than 2 (1 + 1/j).

namespace {

std::vector<ms::Stage> theorem16_stages(int k) {
  std::vector<ms::Stage> stages;
  for (int l = 0; l <= k; ++l) {
    stages.push_back(mt::hand_stage(l, l, 1, 1));
    stages.back().weight_bytes = l == 0 ? 1 : l;
  }
  return stages;
}

madpipe::Platform theorem16_platform(int k) { return platform_of(k + 1, k + 1, 1e12); }

}  // namespace

TEST(Theorem16, KPeriodicPatternReachesTwoTimesOnePlusOneOverK) {
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("k " + std::to_string(k));
    const auto stages = theorem16_stages(k);
    const auto platform = theorem16_platform(k);
    const auto found = ms::schedule_under_memory(stages, platform);
    ASSERT_TRUE(found.has_value());
    EXPECT_NEAR(found->pattern.normalized_period_ms(), 2.0 * (1.0 + 1.0 / k), 1e-9);
    EXPECT_EQ(found->pattern.k, k) << found->method;
    EXPECT_TRUE(ms::fits_memory(stages, found->pattern, platform));
    const auto nca = ms::concurrent_activations(found->pattern, k + 1);
    EXPECT_LE(nca[0], k);
    for (int l = 1; l <= k; ++l) EXPECT_LE(nca[l], k + 1 - l) << "stage " << l;
    const auto violations = mplan::validate(mt::plan_of(stages, platform, found->pattern));
    EXPECT_TRUE(violations.empty()) << mt::describe(violations);
  }
}

TEST(Theorem16, OnePeriodicPatternsNeedPeriodFour) {
  for (int k = 1; k <= 4; ++k) {
    SCOPED_TRACE("k " + std::to_string(k));
    const auto stages = theorem16_stages(k);
    const auto platform = theorem16_platform(k);
    ms::ScheduleSearchOptions options;
    options.max_k = 1;
    const auto found = ms::schedule_under_memory(stages, platform, options);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->pattern.k, 1);
    EXPECT_NEAR(found->pattern.normalized_period_ms(), 4.0, 1e-9);
    EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, found->pattern)).empty());
  }
}

TEST(Theorem16, SmallerKCannotBeatTheBound) {
  // With patterns of at most j < k micro-batches per period, the normalized period is at least
  // 2 (1 + 1/j) > 2 (1 + 1/k).
  for (int k = 2; k <= 4; ++k) {
    for (int j = 1; j < k; ++j) {
      SCOPED_TRACE("k " + std::to_string(k) + " j " + std::to_string(j));
      const auto stages = theorem16_stages(k);
      const auto platform = theorem16_platform(k);
      ms::ScheduleSearchOptions options;
      options.max_k = j;
      const auto found = ms::schedule_under_memory(stages, platform, options);
      ASSERT_TRUE(found.has_value());
      EXPECT_LE(found->pattern.k, j);
      EXPECT_GE(found->pattern.normalized_period_ms(), 2.0 * (1.0 + 1.0 / j) - 1e-9);
      EXPECT_GT(found->pattern.normalized_period_ms(), 2.0 * (1.0 + 1.0 / k) + 1e-6);
      EXPECT_TRUE(mplan::validate(mt::plan_of(stages, platform, found->pattern)).empty());
    }
  }
}

TEST(Theorem16, MoreMemoryRemovesTheNeed) {
  // With one more byte per GPU, stage 0 can keep k + 1 micro-batches and plain 1F1B runs at
  // period 2 (no idle time).
  for (int k = 1; k <= 4; ++k) {
    const auto stages = theorem16_stages(k);
    const auto platform = platform_of(k + 1, k + 2, 1e12);
    const auto found = ms::schedule_under_memory(stages, platform);
    ASSERT_TRUE(found.has_value());
    EXPECT_NEAR(found->pattern.normalized_period_ms(), 2.0, 1e-9) << "k " << k;
  }
}

// The memory of a k-periodic variant told from its 1-periodic pattern agrees with the variant
// built and measured, at limits just below, at and above the variant's largest GPU: always told
// with one stage per GPU (no separate W), told by bounds or not at all elsewhere.
TEST(KVariantMemory, ToldWithoutBuildingAgreesWithTheBuiltVariant) {
  std::mt19937 rng(29);
  int told = 0, compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const bool contiguous = trial % 2 == 0;
    const int layers = 3 + trial % 7;
    const int gpus = contiguous ? layers : 2 + trial % 3;
    const int n = contiguous ? layers : 2 + static_cast<int>(rng() % (layers - 1));
    const auto stages = mt::random_stages(rng, layers, n, gpus, contiguous);
    madpipe::Platform platform = platform_of(gpus);
    const double lo = mt::busiest_load(stages, platform);
    const auto base = contiguous ? ms::one_f_one_b_star(stages, platform, lo)
                                 : ms::modulo_schedule(stages, platform, 1.2 * lo);
    if (!base) continue;
    const ms::InFlightPeaks peaks = ms::in_flight_peaks(*base, n);
    EXPECT_EQ(peaks.stored, ms::concurrent_activations(*base, n));
    for (int k = 1; k <= 6; ++k) {
      const ms::Pattern variant = ms::drop_every_kth_plus_one(*base, k);
      const auto totals = ms::totals(ms::evaluate_memory(stages, variant, platform));
      EXPECT_EQ(ms::totals(ms::evaluate_k_variant_memory(stages, *base, k, platform)), totals)
          << "trial " << trial << " k " << k;
      const std::int64_t largest = *std::max_element(totals.begin(), totals.end());
      for (std::int64_t limit : {largest - 1, largest, largest + 1}) {
        SCOPED_TRACE("trial " + std::to_string(trial) + " k " + std::to_string(k) + " limit " +
                     std::to_string(limit - largest));
        platform.memory_bytes = limit;
        const std::optional<bool> fits = ms::k_variant_fits_memory(stages, peaks, k, platform);
        EXPECT_EQ(ms::k_variant_fits(stages, *base, k, platform),
                  ms::fits_memory(stages, variant, platform));
        ++compared;
        if (contiguous) {
          ASSERT_TRUE(fits.has_value());
        }
        if (!fits) continue;
        ++told;
        EXPECT_EQ(*fits, ms::fits_memory(stages, variant, platform));
      }
    }
  }
  EXPECT_GT(compared, 300);
  EXPECT_GT(told, compared / 2);
}

// With split backwards (what W keeps counts too) and several stages per GPU, the variant's memory
// computed from its 1-periodic pattern is the built variant's, GPU by GPU.
TEST(KVariantMemory, ComputedWithoutBuildingEqualsTheBuiltVariantWithSplitBackwards) {
  std::mt19937 rng(31);
  int compared = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int layers = 4 + trial % 6;
    const int gpus = 2 + trial % 3;
    const int n = 2 + static_cast<int>(rng() % (layers - 1));
    auto stages = mt::random_stages(rng, layers, n, gpus, false);
    for (ms::Stage& stage : stages) {
      stage.backward_weight_ms = 0.4 * stage.backward_ms;
      stage.weight_kept_bytes = stage.stored_bytes / 2 + 1;
    }
    const madpipe::Platform platform = platform_of(gpus);
    const auto base =
        ms::modulo_schedule(stages, platform, 2.0 * mt::busiest_load(stages, platform));
    if (!base) continue;
    for (int k = 2; k <= 5; ++k) {
      const ms::Pattern variant = ms::drop_every_kth_plus_one(*base, k);
      const auto computed = ms::evaluate_k_variant_memory(stages, *base, k, platform);
      const auto built = ms::evaluate_memory(stages, variant, platform);
      ASSERT_EQ(computed.size(), built.size());
      for (std::size_t g = 0; g < built.size(); ++g)
        EXPECT_EQ(computed[g].activations, built[g].activations)
            << "trial " << trial << " k " << k << " gpu " << g;
      EXPECT_EQ(ms::totals(computed), ms::totals(built));
      ++compared;
    }
  }
  EXPECT_GT(compared, 60);
}
