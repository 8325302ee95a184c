#include "partition/loop_placements.hpp"

#include "core/error.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/search.hpp"

#include <algorithm>
#include <limits>

std::optional<std::vector<int>> madpipe::partition::balanced_cuts(const ChainCosts& costs,
                                                                  const Platform& platform,
                                                                  int chunks) {
  const int layers = costs.num_layers();
  if (chunks < 1 || layers < chunks) return std::nullopt;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[c][l]: the smallest largest compute of layers 0..l-1 cut into c chunks; from[c][l] the
  // first layer of the last of them.
  std::vector<std::vector<double>> best(chunks + 1, std::vector<double>(layers + 1, kInf));
  std::vector<std::vector<int>> from(chunks + 1, std::vector<int>(layers + 1, -1));
  best[0][0] = 0;
  for (int c = 1; c <= chunks; ++c)
    for (int l = c; l <= layers - (chunks - c); ++l)
      for (int first = c - 1; first < l; ++first) {
        if (best[c - 1][first] == kInf) continue;
        double value = std::max(best[c - 1][first], costs.compute_ms(first, l - 1));
        if (first > 0) value = std::max(value, link_ms(costs, first - 1, platform));
        if (value < best[c][l]) {
          best[c][l] = value;
          from[c][l] = first;
        }
      }
  std::vector<int> first_layers(chunks);
  int end = layers;
  for (int c = chunks; c >= 1; --c) {
    first_layers[c - 1] = from[c][end];
    end = from[c][end];
  }
  return first_layers;
}

std::optional<madpipe::partition::Allocation> madpipe::partition::interleaved_allocation(
    const ChainCosts& costs, const Platform& platform, int virtual_stages) {
  const int gpus = platform.gpus;
  const std::optional<std::vector<int>> cuts =
      balanced_cuts(costs, platform, gpus * virtual_stages);
  if (!cuts) return std::nullopt;
  Allocation allocation;
  allocation.first_layers = *cuts;
  for (int c = 0; c < gpus * virtual_stages; ++c) allocation.gpus.push_back(c % gpus);
  return allocation;
}

std::optional<madpipe::partition::Allocation> madpipe::partition::v_shape_allocation(
    const ChainCosts& costs, const Platform& platform) {
  const int gpus = platform.gpus;
  const std::optional<std::vector<int>> cuts = balanced_cuts(costs, platform, 2 * gpus);
  if (!cuts) return std::nullopt;
  Allocation allocation;
  allocation.first_layers = *cuts;
  for (int c = 0; c < 2 * gpus; ++c) allocation.gpus.push_back(c < gpus ? c : 2 * gpus - 1 - c);
  return allocation;
}

std::int64_t madpipe::partition::least_memory(const ChainCosts& costs, const Platform& platform,
                                              const Allocation& allocation) {
  const std::vector<schedule::Stage> stages = stages_of(costs, allocation);
  double total = 0;
  for (const schedule::PipelineResource& r : schedule::pipeline_resources(stages, platform))
    total += r.load_ms();
  const double busiest = schedule::busiest_resource_ms(stages, platform);
  const std::optional<schedule::Pattern> pattern =
      schedule::modulo_schedule(stages, platform, std::max(total, busiest) * (1 + 1e-9));
  if (!pattern) return -1;
  std::int64_t most = 0;
  for (std::int64_t bytes : schedule::totals(schedule::evaluate_memory(stages, *pattern, platform)))
    most = std::max(most, bytes);
  return most;
}

std::optional<madpipe::partition::Allocation> madpipe::partition::fixed_placement(
    const ChainCosts& costs, const Platform& platform, Algorithm algorithm) {
  if (algorithm == Algorithm::ZbV) return v_shape_allocation(costs, platform);
  if (algorithm == Algorithm::Interleaved) return interleaved_allocation(costs, platform, 2);
  throw Error(ErrorKind::Internal, "", "algorithm",
              std::string(to_string(algorithm)) + " has no fixed placement");
}
