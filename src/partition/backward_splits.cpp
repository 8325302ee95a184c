#include "partition/backward_splits.hpp"

#include "core/units.hpp"

#include <set>
#include <sstream>

using madpipe::schedule::Stage;

namespace {

using Mask = std::vector<bool>;  // per stage: true when its backward splits

// The masks one move away from `current`; stages that cannot choose keep their value.
std::vector<Mask> moves(const Mask& current, const std::vector<bool>& choosable,
                        const std::vector<Stage>& stages) {
  const std::size_t n = current.size();
  std::vector<Mask> out;
  auto add = [&](Mask mask) {
    for (std::size_t s = 0; s < n; ++s)
      if (!choosable[s]) mask[s] = current[s];
    if (mask != current) out.push_back(std::move(mask));
  };
  for (std::size_t s = 0; s < n; ++s) {
    Mask mask = current;
    mask[s] = !mask[s];
    add(mask);
  }
  std::set<int> gpus;
  for (const Stage& stage : stages) gpus.insert(stage.gpu);
  for (int gpu : gpus)
    for (bool split : {false, true}) {
      Mask mask = current;
      for (std::size_t s = 0; s < n; ++s)
        if (stages[s].gpu == gpu) mask[s] = split;
      add(mask);
    }
  // Early stages keep the most micro-batches in flight, late ones idle the most in a 1F1B
  // pipeline: thresholds along the chain, either way round.
  for (std::size_t first = 1; first < n; ++first)
    for (bool early_split : {false, true}) {
      Mask mask(n);
      for (std::size_t s = 0; s < n; ++s) mask[s] = (s < first) == early_split;
      add(mask);
    }
  return out;
}

std::vector<Stage> apply(const madpipe::ChainCosts& costs, std::vector<Stage> stages,
                         const Mask& mask) {
  for (std::size_t s = 0; s < stages.size(); ++s)
    stages[s] = mask[s] ? madpipe::schedule::with_split_backward(costs, stages[s])
                        : madpipe::schedule::with_whole_backward(stages[s]);
  return stages;
}

}  // namespace

madpipe::partition::SplitChoice madpipe::partition::choose_backward_splits(
    const ChainCosts& costs, const Platform& platform, SplitChoice start,
    const RefineOptions& options, const std::function<void(const std::string&)>& progress) {
  SplitChoice best = std::move(start);
  const std::size_t n = best.stages.size();
  std::vector<bool> choosable(n);
  Mask current(n);
  bool any = false;
  for (std::size_t s = 0; s < n; ++s) {
    choosable[s] = madpipe::schedule::can_split_backward(costs, best.stages[s]);
    current[s] = best.stages[s].splits_backward();
    any = any || choosable[s];
  }
  if (!any) return best;
  std::set<Mask> seen{current};
  int evaluations = 0;
  bool improved = true;
  auto period = [&] { return best.scheduled.pattern.normalized_period_ms(); };
  while (improved && evaluations < options.max_evaluations &&
         period() > options.lower_bound_ms * (1 + 1e-9)) {
    improved = false;
    for (const Mask& mask : moves(current, choosable, best.stages)) {
      if (!seen.insert(mask).second) continue;
      if (++evaluations > options.max_evaluations) break;
      if (options.out_of_time && options.out_of_time()) {
        best.cut = true;
        return best;
      }
      schedule::ScheduleSearchOptions bounded = options.search;
      bounded.give_up_at_ms = period() * (1 - 1e-6);
      std::vector<Stage> stages = apply(costs, best.stages, mask);
      const auto scheduled = schedule::schedule_under_memory(stages, platform, bounded);
      if (!scheduled || scheduled->pattern.normalized_period_ms() >= period() * (1 - 1e-6))
        continue;
      best.stages = std::move(stages);
      best.scheduled = *scheduled;
      current = mask;
      improved = true;
      if (progress) {
        int split = 0;
        for (bool s : mask) split += s ? 1 : 0;
        std::ostringstream line;
        line << "backward splits: " << format_ms(period()) << " with " << split << " of " << n
             << " stages split via " << scheduled->method << " (" << evaluations
             << " schedules tried)";
        progress(line.str());
      }
      break;
    }
  }
  return best;
}
