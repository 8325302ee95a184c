#include "schedule/shared_weights.hpp"

#include <algorithm>

double madpipe::schedule::ring_all_reduce_ms(std::int64_t bytes, int replicas,
                                             double bandwidth_bytes_per_ms, double latency_ms) {
  if (replicas <= 1) return 0.0;
  const double steps = 2.0 * (replicas - 1);
  return steps / replicas * static_cast<double>(bytes) / bandwidth_bytes_per_ms +
         steps * latency_ms;
}

std::vector<madpipe::schedule::SharedWeightPlacement> madpipe::schedule::shared_weight_placements(
    const std::vector<Stage>& stages) {
  std::vector<SharedWeightPlacement> placements;
  for (const Stage& stage : stages) {
    for (const SharedWeight& shared : stage.shared_weights) {
      auto it =
          std::find_if(placements.begin(), placements.end(),
                       [&](const SharedWeightPlacement& p) { return p.group == shared.group; });
      if (it == placements.end()) {
        placements.push_back(SharedWeightPlacement{shared.group, shared.bytes, {}});
        it = placements.end() - 1;
      }
      if (std::find(it->gpus.begin(), it->gpus.end(), stage.gpu) == it->gpus.end())
        it->gpus.push_back(stage.gpu);
    }
  }
  for (SharedWeightPlacement& placement : placements)
    std::sort(placement.gpus.begin(), placement.gpus.end());
  std::sort(placements.begin(), placements.end(),
            [](const SharedWeightPlacement& a, const SharedWeightPlacement& b) {
              return a.group < b.group;
            });
  return placements;
}

std::int64_t madpipe::schedule::repeated_shared_bytes(const std::vector<Stage>& stages, int gpu) {
  std::vector<int> seen;
  std::int64_t repeated = 0;
  for (const Stage& stage : stages) {
    if (stage.gpu != gpu) continue;
    for (const SharedWeight& shared : stage.shared_weights) {
      if (std::find(seen.begin(), seen.end(), shared.group) != seen.end())
        repeated += shared.bytes;
      else
        seen.push_back(shared.group);
    }
  }
  return repeated;
}

double madpipe::schedule::tied_exchange_ms(const std::vector<Stage>& stages,
                                           const Platform& platform) {
  double total = 0;
  for (const SharedWeightPlacement& placement : shared_weight_placements(stages)) {
    const int n = static_cast<int>(placement.gpus.size());
    if (n <= 1) continue;
    double slowest = 0;
    for (int a = 0; a < n; ++a)
      for (int b = a + 1; b < n; ++b) {
        const double bandwidth = link_bandwidth(platform, placement.gpus[a], placement.gpus[b]);
        slowest = slowest == 0 ? bandwidth : std::min(slowest, bandwidth);
      }
    total += ring_all_reduce_ms(placement.bytes, n, slowest, kCollectiveStepLatencyMs);
  }
  return total;
}
