#pragma once

#include "core/chain.hpp"
#include "core/platform.hpp"
#include "partition/allocation.hpp"
#include "schedule/search.hpp"

#include <functional>
#include <optional>
#include <string>

namespace madpipe::partition {

struct RefineOptions {
  int max_evaluations = 150;  // schedules tried; the search is deterministic
  schedule::ScheduleSearchOptions search{};
  std::function<bool()> out_of_time;  // asked before each schedule; true stops the search
  double lower_bound_ms = 0;          // no plan is faster: the search stops once it gets there
};

struct ScheduledAllocation {
  Allocation allocation;
  schedule::ScheduledPattern scheduled;
  bool cut = false;  // refine_allocation(): out_of_time stopped it
};

// Local search over allocations from a scheduled starting point, scoring every neighbour with
// the real scheduler: move a stage boundary by one layer, move a stage to another GPU (which
// makes allocations non-contiguous), split a stage onto another GPU, merge neighbouring stages.
// Takes the first improving move until none improves or the budget is spent. The discretized
// DPs only estimate periods; this corrects their estimates where the schedule disagrees.
ScheduledAllocation refine_allocation(const ChainCosts& costs, const Platform& platform,
                                      ScheduledAllocation start, const RefineOptions& options,
                                      const std::function<void(const std::string&)>& progress);

}  // namespace madpipe::partition
