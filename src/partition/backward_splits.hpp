#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/refine.hpp"
#include "schedule/search.hpp"
#include "schedule/stage.hpp"

#include <functional>
#include <string>
#include <vector>

namespace madpipe::partition {

struct SplitChoice {
  std::vector<schedule::Stage> stages;
  schedule::ScheduledPattern scheduled;
  bool cut = false;  // choose_backward_splits(): out_of_time stopped it
};

// Which stages of a fixed allocation split their backward. W after B fills idle time, but each
// micro-batch keeps its kept bytes from B to W: on a GPU short of memory the split can cost more
// micro-batches in flight than it saves. A local search from `start` over the per-stage choices,
// scoring each with the real scheduler: turn one stage, every stage of one GPU, or the stages
// before or from one stage whole or split. Takes the first improving move until none improves or
// the budget (options.max_evaluations schedules, out_of_time) is spent. Stages that rematerialize
// or offload, and those whose layers do not split, keep what they are.
SplitChoice choose_backward_splits(const ChainCosts& costs, const Platform& platform,
                                   SplitChoice start, const RefineOptions& options,
                                   const std::function<void(const std::string&)>& progress);

}  // namespace madpipe::partition
