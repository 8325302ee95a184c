#include "plan/time_breakdown.hpp"

#include <algorithm>
#include <numeric>

madpipe::plan::TimeBreakdown madpipe::plan::time_breakdown(const Plan& plan,
                                                           const Profile& profile) {
  TimeBreakdown out;
  const int gpus = plan.platform.gpus;
  const double pattern_period = plan.pattern.k > 0 ? plan.pattern.period_ms / plan.pattern.k : 0;
  const double period = std::max(pattern_period, plan.predicted.period_ms);
  if (gpus <= 0 || !(pattern_period > 0)) return out;
  std::vector<double> useful(gpus, 0.0), compute(gpus, 0.0);
  const int layers = static_cast<int>(profile.layers.size());
  for (const schedule::Stage& stage : plan.stages) {
    if (stage.gpu < 0 || stage.gpu >= gpus) continue;
    double plain = 0;
    for (int l = std::max(0, stage.first_layer); l <= std::min(stage.last_layer, layers - 1); ++l)
      plain += profile.layers[l].forward_ms + profile.layers[l].backward_ms;
    useful[stage.gpu] += plain;
    compute[stage.gpu] += std::max(plain, stage.compute_ms());
  }
  const double busiest = *std::max_element(compute.begin(), compute.end());
  const double all = gpus * period;
  const double total_useful = std::accumulate(useful.begin(), useful.end(), 0.0);
  const double total_compute = std::accumulate(compute.begin(), compute.end(), 0.0);
  // Sums of equal loads can round a few ulps below zero; a plan's fractions are never negative.
  out.useful = total_useful / all;
  out.recomputation = std::max(0.0, (total_compute - total_useful) / all);
  out.imbalance = std::max(0.0, (gpus * busiest - total_compute) / all);
  out.tied_exchange = std::max(0.0, (period - pattern_period) / period);
  out.waiting = 1 - out.useful - out.recomputation - out.imbalance - out.tied_exchange;
  if (out.waiting < 1e-12) out.waiting = 0;
  for (double c : compute) out.busy.push_back(c / period);
  return out;
}
