// The contiguous DP's memory estimate against the schedule it stands for, on long chains over
// many GPUs, where T^ is a small part of the delays the DP tracks (its grid of delays is then
// aligned with T^ and rounds up): an allocation it finds for T^ runs 1F1B*(T^) within every
// GPU's memory. (With few GPUs the --delay-steps grid of the thesis is kept: the nearest value,
// clamped at the sum of the loads; an estimate, which the scheduler then decides.)

#include "core/chain.hpp"
#include "partition/madpipe_dp.hpp"
#include "partition/planner.hpp"
#include "schedule/memory.hpp"
#include "schedule/one_f_one_b.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace mp = madpipe::partition;
namespace ms = madpipe::schedule;
namespace mt = madpipe::testing;

namespace {

// `layers` identical blocks, as in a decoder: 1 ms forward, 2 ms backward, 1 MB of weights and
// 4 MB of activations each.
madpipe::Profile identical_blocks(int layers) {
  return mt::make_chain(std::vector<double>(layers, 1.0), std::vector<double>(layers, 2.0),
                        std::vector<std::int64_t>(layers, 1'000'000),
                        std::vector<std::int64_t>(layers, 4'000'000), 4'000'000);
}

struct Case {
  int layers;
  int gpus;
  std::int64_t memory_bytes;
};

}  // namespace

TEST(ContiguousDpMemory, AnAllocationFoundForATargetRunsOneFOneBStarAtItWithinMemory) {
  const mp::Discretization discretization;  // the planner's defaults: 51 delay values
  int checked = 0, refused = 0;
  for (const Case& c :
       {Case{128, 32, 300'000'000}, Case{256, 64, 400'000'000}, Case{256, 64, 900'000'000}}) {
    const madpipe::ChainCosts costs(identical_blocks(c.layers));
    const madpipe::Platform platform = mt::make_platform(c.gpus, c.memory_bytes, 1e9, 3);
    const double bound = costs.total_compute_ms() / c.gpus;
    // Up to twice the bound: T^ stays below 4 steps of the 51-value grid in every case.
    for (double factor = 1.0; factor <= 2.0; factor += 0.125) {
      const double target = factor * bound;
      const mp::DpResult run = mp::madpipe_dp(costs, platform, discretization, false, target,
                                              std::numeric_limits<double>::infinity());
      if (!(run.period_ms < std::numeric_limits<double>::infinity())) {
        ++refused;
        continue;
      }
      const std::vector<ms::Stage> stages = mp::stages_of(costs, run.allocation);
      // The DP's period may exceed its target (a stage longer than T^): 1F1B* runs at the longer.
      const double period = std::max(run.period_ms, target);
      const auto pattern = ms::one_f_one_b_star(stages, platform, period);
      ASSERT_TRUE(pattern.has_value()) << c.layers << " layers, period " << period;
      EXPECT_TRUE(ms::fits_memory(stages, *pattern, platform))
          << c.layers << " layers on " << c.gpus << " GPUs of " << c.memory_bytes
          << " bytes: the DP placed " << stages.size() << " stages for T^ = " << target
          << " ms, whose 1F1B*(" << period << ") does not fit";
      ++checked;
    }
  }
  // Memory binds: the shortest targets are refused, the longer ones give allocations.
  EXPECT_GT(refused, 0);
  EXPECT_GE(checked, 10);
}
