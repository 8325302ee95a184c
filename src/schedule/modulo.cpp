#include "schedule/modulo.hpp"

#include "schedule/one_f_one_b.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

namespace {
// Busy intervals of one resource on the circle [0, T).
class ModuloTable {
 public:
  explicit ModuloTable(double period) : period_(period) {}

  // Earliest absolute time >= ready at which [t, t + d) is free modulo T, if any.
  std::optional<double> earliest_fit(double ready, double duration) const {
    if (duration > period_ + 1e-12 * period_) return std::nullopt;
    const double base = std::floor(ready / period_) * period_;
    const double x = ready - base;
    // Candidate starts: x itself and the end of every busy interval, over two turns.
    std::vector<double> candidates{x};
    for (const auto& [s, e] : busy_) {
      candidates.push_back(e);
      candidates.push_back(e + period_);
    }
    std::sort(candidates.begin(), candidates.end());
    for (double c : candidates) {
      if (c < x) continue;
      if (c > x + period_) break;
      if (is_free(c, duration)) return base + c;
    }
    return std::nullopt;
  }

  // Latest absolute start <= deadline - d at which [t, t + d) is free modulo T, if any.
  std::optional<double> latest_fit(double deadline, double duration) const {
    if (duration > period_ + 1e-12 * period_) return std::nullopt;
    const double latest = deadline - duration;
    const double base = std::floor(latest / period_) * period_;
    const double x = latest - base;
    // Candidate starts: x itself and every busy interval's start minus d, over two turns.
    std::vector<double> candidates{x};
    for (const auto& [s, e] : busy_) {
      candidates.push_back(s - duration);
      candidates.push_back(s - duration - period_);
      candidates.push_back(s - duration + period_);
    }
    std::sort(candidates.rbegin(), candidates.rend());
    for (double c : candidates) {
      if (c > x) continue;
      if (c < x - period_) break;
      if (is_free(c, duration)) return base + c;
    }
    return std::nullopt;
  }

  void occupy(double t, double duration) {
    const double s = t - std::floor(t / period_) * period_;
    busy_.emplace_back(s, s + duration);
  }

 private:
  bool is_free(double start, double duration) const {
    const double eps = 1e-9 * period_;
    const double s = start - std::floor(start / period_) * period_;
    const double e = s + duration;
    for (const auto& [bs, be] : busy_) {
      // Compare against the busy interval and its copies one period before and after.
      for (double shift : {-period_, 0.0, period_}) {
        if (s < be + shift - eps && bs + shift < e - eps) return false;
      }
    }
    return true;
  }

  double period_;
  std::vector<std::pair<double, double>> busy_;
};
}  // namespace

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
  return pattern_from_absolute_times(std::move(chain), period_ms);
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
  return pattern_from_absolute_times(std::move(chain), period_ms);
}
