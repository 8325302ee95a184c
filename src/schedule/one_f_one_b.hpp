#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <vector>

namespace madpipe::schedule {

// In 1F1B* the chain of a contiguous allocation is a chain of resources: each stage, and each
// transfer between stages as a pseudo-stage (2S-1 resources). Resource r has a forward op and a
// backward op; a split stage also has its W op, which nothing waits for.
struct PipelineResource {
  Op forward;            // F of a stage or SEND_ACT of a link
  Op backward;           // B of a stage or SEND_GRAD of a link
  double weight_ms = 0;  // W of a split stage
  // Busy time per micro-batch.
  double load_ms() const noexcept { return chain_ms() + weight_ms; }
  // Time a micro-batch spends on the resource on its way forward and back (W excluded).
  double chain_ms() const noexcept { return forward.duration_ms + backward.duration_ms; }
};
std::vector<PipelineResource> pipeline_resources(const std::vector<Stage>& stages,
                                                 const Platform& platform);

// Groups of 1F1B*(T) (Algorithm 6, phase 1): built greedily from the last resource, a group
// holds consecutive resources whose loads sum to at most T (with split stages, their chain_ms:
// W runs wherever its GPU is idle). Returns for each resource its group number (1 for the group
// holding the last resource); empty if one resource's load exceeds T.
std::vector<int> one_f_one_b_star_groups(const std::vector<PipelineResource>& resources,
                                         double period_ms);

// Absolute start times of micro-batch 0's ops (micro_batch_chain order) in 1F1B* with explicit
// groups; also used as preferred times when the allocation is not contiguous.
std::vector<Op> one_f_one_b_star_times(const std::vector<Stage>& stages, const Platform& platform,
                                       const std::vector<int>& groups, double period_ms);

// 1F1B* pattern with explicit groups (group numbers non-increasing along the chain, each group
// consecutive, sum of loads in a group <= T): Equal Shift Pattern inside each group, groups
// connected with no idle time between forwards. The NCA of a resource of group g is g. The W ops
// of split stages are placed by with_weight_ops: nullopt when they do not fit.
std::optional<Pattern> one_f_one_b_star_with_groups(const std::vector<Stage>& stages,
                                                    const Platform& platform,
                                                    const std::vector<int>& groups,
                                                    double period_ms);

// 1F1B*(T) (Algorithm 6) for a contiguous allocation; nullopt if a resource's load exceeds T.
std::optional<Pattern> one_f_one_b_star(const std::vector<Stage>& stages, const Platform& platform,
                                        double period_ms);

// 1F1B as in PipeDream-Flush: stage s keeps S - s micro-batches in flight (a group is a stage
// and the link before it), at the smallest period these groups allow. With split stages, W runs
// right where the GPU is idle after B: ZB-H1's schedule.
Pattern one_f_one_b(const std::vector<Stage>& stages, const Platform& platform);

}  // namespace madpipe::schedule
