#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::schedule {

enum class PatternFamily {
  OneFOneBStar,  // 1F1B*(T) and its k-periodic variants; contiguous allocations only
  Modulo,        // modulo list scheduling (ASAP) and its k-periodic variants; any allocation
  ModuloLate,    // modulo list scheduling (ALAP) and its k-periodic variants; any allocation
  GuidedModulo,  // modulo list scheduling at 1F1B* times and its k-periodic variants
};

// What a schedule search did, for tests and benchmarks that count work rather than time it.
struct ScheduleSearchStats {
  int patterns_generated = 0;  // 1-periodic patterns built, each period of each family once
  int variants_measured = 0;   // k-periodic variants whose memory the bounds could not tell
  int candidates_retimed = 0;  // patterns (k-periodic variants built for it) retimed as candidates
};

struct ScheduleSearchOptions {
  std::vector<PatternFamily> families{PatternFamily::OneFOneBStar, PatternFamily::GuidedModulo,
                                      PatternFamily::Modulo, PatternFamily::ModuloLate};
  int max_k = 0;  // largest k tried; 0: number of pipeline resources (k >= that never helps)
  // Patterns whose normalized period is not below this are of no interest to the caller: the
  // search stops as soon as it knows it cannot go below (e.g. the best plan found so far).
  double give_up_at_ms = std::numeric_limits<double>::infinity();
  // Asked before every pattern the search generates: once true, the search returns the best
  // pattern found so far, or, having none, tries only the longest period (at which a pattern
  // keeps one micro-batch in flight per stage) of each family, k = 1, and returns the first that
  // fits: a plan wherever the allocation has one at all, at the cost of one pattern a family.
  std::function<bool()> out_of_time;
  ScheduleSearchStats* stats = nullptr;  // added to when set
};

struct ScheduledPattern {
  Pattern pattern;
  std::string method;  // e.g. "1f1b*", "modulo, k=2"
};

// Best pattern for a fixed allocation whose memory (evaluate_memory totals) fits
// platform.memory_bytes on every GPU: for each family and each k, a binary search on the period
// (Algorithm 7 and its k-periodic variant), then retime(). k goes up to max_k, and only while
// some 1-periodic pattern of the family keeps more than k micro-batches in flight on a stage
// (below that, dropping one in k + 1 frees no stage's memory). nullopt when nothing fits.
std::optional<ScheduledPattern> schedule_under_memory(const std::vector<Stage>& stages,
                                                      const Platform& platform,
                                                      const ScheduleSearchOptions& options = {});

// The busiest GPU's or link's load per micro-batch: no pattern of this allocation is faster.
double busiest_resource_ms(const std::vector<Stage>& stages, const Platform& platform);

}  // namespace madpipe::schedule
