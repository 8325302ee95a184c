#include "schedule/one_f_one_b.hpp"

#include "core/error.hpp"
#include "schedule/weight_placement.hpp"

#include <algorithm>

std::vector<madpipe::schedule::PipelineResource> madpipe::schedule::pipeline_resources(
    const std::vector<Stage>& stages, const Platform& platform) {
  const std::vector<Op> chain = micro_batch_chain(stages, platform);
  const std::size_t half = chain.size() / 2;  // forward ops, then their backward ops mirrored
  std::vector<PipelineResource> resources(half);
  for (std::size_t r = 0; r < half; ++r) {
    resources[r].forward = chain[r];
    resources[r].backward = chain[chain.size() - 1 - r];
    if (resources[r].forward.kind == OpKind::F)
      resources[r].weight_ms = stages[resources[r].forward.stage].backward_weight_ms;
  }
  return resources;
}

std::vector<int> madpipe::schedule::one_f_one_b_star_groups(
    const std::vector<PipelineResource>& resources, double period_ms) {
  const int n = static_cast<int>(resources.size());
  std::vector<int> groups(n, 0);
  int group = 1;
  double load = 0;
  for (int r = n - 1; r >= 0; --r) {
    if (resources[r].load_ms() > period_ms) return {};
    const double u = resources[r].chain_ms();
    if (load + u > period_ms) {
      ++group;
      load = 0;
    }
    load += u;
    groups[r] = group;
  }
  return groups;
}

std::vector<madpipe::schedule::Op> madpipe::schedule::one_f_one_b_star_times(
    const std::vector<Stage>& stages, const Platform& platform, const std::vector<int>& groups,
    double period_ms) {
  const std::vector<PipelineResource> resources = pipeline_resources(stages, platform);
  const int n = static_cast<int>(resources.size());
  if (static_cast<int>(groups.size()) != n)
    throw Error(ErrorKind::Internal, "", "", "1F1B*: one group number per resource expected");
  // Absolute times of micro-batch 0: forwards back to back; inside group g, the backwards of the
  // group follow its last forward as a V, (g - 1) periods later.
  std::vector<Op> chain(2 * n);
  double t = 0;
  for (int r = 0; r < n; ++r) {
    chain[r] = resources[r].forward;
    chain[r].start_ms = t;
    t += resources[r].forward.duration_ms;
  }
  int hi = n - 1;
  while (hi >= 0) {
    int lo = hi;
    while (lo > 0 && groups[lo - 1] == groups[hi]) --lo;
    double b = chain[hi].start_ms + chain[hi].duration_ms + (groups[hi] - 1) * period_ms;
    for (int r = hi; r >= lo; --r) {
      Op& backward = chain[2 * n - 1 - r];
      backward = resources[r].backward;
      backward.start_ms = b;
      b += backward.duration_ms;
    }
    hi = lo - 1;
  }
  return chain;
}

std::optional<madpipe::schedule::Pattern> madpipe::schedule::one_f_one_b_star_with_groups(
    const std::vector<Stage>& stages, const Platform& platform, const std::vector<int>& groups,
    double period_ms) {
  return with_weight_ops(
      pattern_from_absolute_times(one_f_one_b_star_times(stages, platform, groups, period_ms),
                                  period_ms),
      stages, platform);
}

std::optional<madpipe::schedule::Pattern> madpipe::schedule::one_f_one_b_star(
    const std::vector<Stage>& stages, const Platform& platform, double period_ms) {
  const std::vector<int> groups =
      one_f_one_b_star_groups(pipeline_resources(stages, platform), period_ms);
  if (groups.empty()) return std::nullopt;
  return one_f_one_b_star_with_groups(stages, platform, groups, period_ms);
}

madpipe::schedule::Pattern madpipe::schedule::one_f_one_b(const std::vector<Stage>& stages,
                                                          const Platform& platform) {
  const std::vector<PipelineResource> resources = pipeline_resources(stages, platform);
  const int n = static_cast<int>(resources.size());
  std::vector<int> groups(n);
  std::vector<double> group_load;
  int group = 0;
  for (int r = n - 1; r >= 0; --r) {
    if (resources[r].forward.kind == OpKind::F) {  // a stage opens a new group...
      ++group;
      group_load.push_back(0);
    }
    groups[r] = group;  // ...which also holds the link before it
    group_load.back() += resources[r].load_ms();
  }
  const double period = *std::max_element(group_load.begin(), group_load.end());
  // W fits: on its GPU a stage runs F and B back to back, and idles the rest of the period.
  std::optional<Pattern> pattern = one_f_one_b_star_with_groups(stages, platform, groups, period);
  if (!pattern) throw Error(ErrorKind::Internal, "", "", "1F1B: no room for W after B");
  return *pattern;
}
