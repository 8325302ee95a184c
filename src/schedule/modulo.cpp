#include "schedule/modulo.hpp"

#include "schedule/modulo_table.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/weight_placement.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

std::optional<madpipe::schedule::Pattern> madpipe::schedule::modulo_schedule(
    const std::vector<Stage>& stages, const Platform& platform, double period_ms,
    ModuloDirection direction) {
  if (period_ms <= 0) return std::nullopt;
  std::vector<Op> chain = micro_batch_chain(stages, platform);
  std::map<int, ModuloTable> tables;
  const bool forward = direction == ModuloDirection::AsSoonAsPossible;
  // Forward: each op as early as possible after its predecessor. Backward: from the end of B0,
  // each op as late as possible before its successor (time runs negative; normalize() copes).
  double boundary = 0;
  for (std::size_t n = 0; n < chain.size(); ++n) {
    Op& op = chain[forward ? n : chain.size() - 1 - n];
    auto it = tables.try_emplace(resource_of(op, platform.gpus), period_ms).first;
    const std::optional<double> start = forward ? it->second.earliest_fit(boundary, op.duration_ms)
                                                : it->second.latest_fit(boundary, op.duration_ms);
    if (!start) return std::nullopt;
    it->second.occupy(*start, op.duration_ms);
    op.start_ms = *start;
    boundary = forward ? *start + op.duration_ms : *start;
  }
  return with_weight_ops(pattern_from_absolute_times(std::move(chain), period_ms), stages,
                         platform);
}

std::optional<madpipe::schedule::Pattern> madpipe::schedule::guided_modulo_schedule(
    const std::vector<Stage>& stages, const Platform& platform, double period_ms) {
  if (period_ms <= 0) return std::nullopt;
  const std::vector<int> groups =
      one_f_one_b_star_groups(pipeline_resources(stages, platform), period_ms);
  if (groups.empty()) return std::nullopt;
  std::vector<Op> chain = one_f_one_b_star_times(stages, platform, groups, period_ms);
  std::map<int, ModuloTable> tables;
  double ready = 0;
  for (Op& op : chain) {
    auto it = tables.try_emplace(resource_of(op, platform.gpus), period_ms).first;
    const double release = std::max(ready, op.start_ms);
    const std::optional<double> start = it->second.earliest_fit(release, op.duration_ms);
    if (!start) return std::nullopt;
    it->second.occupy(*start, op.duration_ms);
    op.start_ms = *start;
    ready = *start + op.duration_ms;
  }
  return with_weight_ops(pattern_from_absolute_times(std::move(chain), period_ms), stages,
                         platform);
}
