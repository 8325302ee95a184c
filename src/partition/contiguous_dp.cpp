#include "partition/contiguous_dp.hpp"

#include "schedule/memory.hpp"

#include <algorithm>
#include <limits>
#include <vector>

std::optional<madpipe::partition::Allocation> madpipe::partition::fixed_in_flight_partition(
    const ChainCosts& costs, const Platform& platform, const std::function<int(int)>& in_flight,
    StageOptions* remat) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int L = costs.num_layers();
  const int P = platform.gpus;
  // best[q][i]: smallest max load for layers i..L-1 cut into exactly q stages; next[q][i]: the
  // first layer of the second of those stages.
  std::vector<std::vector<double>> best(P + 1, std::vector<double>(L + 1, kInf));
  std::vector<std::vector<int>> next(P + 1, std::vector<int>(L + 1, -1));
  std::vector<std::vector<int>> option(P + 1, std::vector<int>(L + 1, -1));  // remat, -1 plain
  best[0][L] = 0;
  for (int q = 1; q <= P; ++q) {
    const int nca = in_flight(q);
    for (int i = L - 1; i >= 0; --i) {
      for (int j = i; j < L; ++j) {  // stage i..j
        double load = costs.compute_ms(i, j);
        if (load >= best[q][i]) break;
        const double rest = best[q - 1][j + 1];
        if (rest == kInf) continue;
        const schedule::StageMemory terms = schedule::stage_memory(costs, i, j, platform);
        const std::int64_t fixed = terms.fixed();
        const std::int64_t memory = terms.total(nca);
        int choice = -1;
        if (memory > platform.memory_bytes) {
          if (!remat || !remat->enabled() || fixed > platform.memory_bytes) continue;
          choice =
              remat->fastest_fitting(i, j, nca, static_cast<double>(platform.memory_bytes - fixed));
          if (choice < 0) continue;
          const remat::RematOption& o = remat->of(i, j)[choice];
          load = o.forward_ms + o.backward_ms;
          if (load >= best[q][i]) continue;
        }
        const double link = j + 1 < L ? link_ms(costs, j, platform) : 0.0;
        const double value = std::max({load, link, rest});
        if (value < best[q][i]) {
          best[q][i] = value;
          next[q][i] = j + 1;
          option[q][i] = choice;
        }
      }
    }
  }
  int best_q = -1;
  for (int q = 1; q <= P; ++q)
    if (best[q][0] < kInf && (best_q < 0 || best[q][0] < best[best_q][0])) best_q = q;
  if (best_q < 0) return std::nullopt;
  Allocation allocation;
  allocation.estimated_period_ms = best[best_q][0];
  int i = 0;
  for (int q = best_q; q > 0; --q) {
    allocation.first_layers.push_back(i);
    allocation.gpus.push_back(best_q - q);
    if (option[q][i] >= 0)
      allocation.remat.emplace(std::make_pair(i, next[q][i] - 1),
                               remat->of(i, next[q][i] - 1)[option[q][i]]);
    i = next[q][i];
  }
  return allocation;
}
