#include "schedule/period_bound.hpp"

#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"

#include <algorithm>
#include <limits>

double madpipe::schedule::memory_period_bound_ms(const std::vector<Stage>& stages,
                                                 const Platform& platform) {
  const int n = static_cast<int>(stages.size());
  const std::vector<Op> chain = micro_batch_chain(stages, platform);
  // before[i]: the chain's time before its op i; the round trip of stage s runs from its F to
  // its B.
  std::vector<double> before(chain.size() + 1, 0.0);
  std::vector<int> forward_at(n, -1), backward_at(n, -1);
  for (std::size_t i = 0; i < chain.size(); ++i) {
    before[i + 1] = before[i] + chain[i].duration_ms;
    if (chain[i].stage < 0 || chain[i].stage >= n) continue;
    if (chain[i].kind == OpKind::F) forward_at[chain[i].stage] = static_cast<int>(i);
    if (chain[i].kind == OpKind::B) backward_at[chain[i].stage] = static_cast<int>(i);
  }
  std::vector<double> held(platform.gpus, 0.0);  // sum of stored bytes x round trip, per GPU
  for (int s = 0; s < n; ++s) {
    const int g = stages[s].gpu;
    if (g < 0 || g >= platform.gpus || forward_at[s] < 0 || backward_at[s] < forward_at[s])
      continue;
    const double round_trip = before[backward_at[s] + 1] - before[forward_at[s]];
    held[g] += static_cast<double>(stages[s].stored_bytes) * round_trip;
  }
  double bound = 0;
  for (int g = 0; g < platform.gpus; ++g) {
    if (held[g] <= 0) continue;
    const double room = static_cast<double>(platform.memory_bytes) -
                        static_cast<double>(static_memory(stages, g, platform).total());
    if (room <= 0) return std::numeric_limits<double>::infinity();
    bound = std::max(bound, held[g] / room);
  }
  // Counts within the memory model's tolerance of an end count as ended.
  return bound * (1 - 1e-6);
}
