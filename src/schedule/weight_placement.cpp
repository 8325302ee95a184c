#include "schedule/weight_placement.hpp"

#include "schedule/modulo_table.hpp"

#include <algorithm>
#include <map>

namespace madpipe::schedule {
namespace {
// Adds the W ops to `pattern`; false when some W finds no room (the pattern is then incomplete).
bool place_weight_ops(Pattern& pattern, const std::vector<Stage>& stages,
                      const Platform& platform) {
  const bool any_split = std::any_of(stages.begin(), stages.end(),
                                     [](const Stage& stage) { return stage.splits_backward(); });
  if (!any_split || pattern.period_ms <= 0) return !any_split;
  const double period = pattern.period_ms;
  const int k = std::max(1, pattern.k);
  std::map<int, ModuloTable> tables;
  std::vector<std::size_t> backwards;
  for (std::size_t i = 0; i < pattern.ops.size(); ++i) {
    const Op& op = pattern.ops[i];
    tables.try_emplace(resource_of(op, platform.gpus), period)
        .first->second.occupy(op.start_ms, op.duration_ms);
    if (op.kind == OpKind::B && op.stage >= 0 && op.stage < static_cast<int>(stages.size()) &&
        stages[op.stage].splits_backward())
      backwards.push_back(i);
  }
  // The end of B for a common micro-batch: micro-batch i runs an op of shift s in period
  // (i - s) / k, so ends compare as end - s * T / k.
  auto end_of = [&](std::size_t i) {
    const Op& b = pattern.ops[i];
    return b.start_ms + b.duration_ms - static_cast<double>(b.shift) * period / k;
  };
  std::stable_sort(backwards.begin(), backwards.end(),
                   [&](std::size_t x, std::size_t y) { return end_of(x) < end_of(y); });
  std::vector<Op> placed;
  for (std::size_t i : backwards) {
    const Op& b = pattern.ops[i];
    Op w;
    w.kind = OpKind::W;
    w.stage = b.stage;
    w.gpu = b.gpu;
    w.duration_ms = stages[b.stage].backward_weight_ms;
    ModuloTable& table = tables.try_emplace(b.gpu, period).first->second;
    const std::optional<double> start =
        table.earliest_fit(b.start_ms + b.duration_ms, w.duration_ms);
    if (!start) return false;
    table.occupy(*start, w.duration_ms);
    w.start_ms = *start;
    w.shift = b.shift;
    placed.push_back(w);
  }
  pattern.ops.insert(pattern.ops.end(), placed.begin(), placed.end());
  normalize(pattern);
  sort_ops(pattern);
  return true;
}

}  // namespace
}  // namespace madpipe::schedule

std::optional<madpipe::schedule::Pattern> madpipe::schedule::with_weight_ops(
    Pattern pattern, const std::vector<Stage>& stages, const Platform& platform) {
  if (!place_weight_ops(pattern, stages, platform)) return std::nullopt;
  return pattern;
}
