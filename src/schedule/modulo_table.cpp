#include "schedule/modulo_table.hpp"

#include <algorithm>
#include <cmath>

using madpipe::schedule::ModuloTable;

std::optional<double> ModuloTable::earliest_fit(double ready, double duration) const {
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

std::optional<double> ModuloTable::latest_fit(double deadline, double duration) const {
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

void ModuloTable::occupy(double t, double duration) {
  const double s = t - std::floor(t / period_) * period_;
  busy_.emplace_back(s, s + duration);
}

bool ModuloTable::is_free(double start, double duration) const {
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
