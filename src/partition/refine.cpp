#include "partition/refine.hpp"

#include "core/units.hpp"

#include <algorithm>
#include <set>
#include <sstream>

using madpipe::partition::Allocation;

// Neighbouring stages on one GPU are one stage.
static Allocation merge_neighbours(const Allocation& a) {
  Allocation merged;
  for (std::size_t s = 0; s < a.gpus.size(); ++s) {
    if (s > 0 && a.gpus[s] == a.gpus[s - 1]) continue;
    merged.first_layers.push_back(a.first_layers[s]);
    merged.gpus.push_back(a.gpus[s]);
  }
  return merged;
}

// GPUs renumbered in order of first use, so that equivalent allocations compare equal. On a
// platform whose links differ, only renumberings that keep GPUs on their nodes are equivalent:
// GPUs are renumbered within their node, and nodes in order of first use when all have as many
// GPUs.
static Allocation canonical(Allocation a, const madpipe::Platform& platform) {
  std::vector<int> renumber(*std::max_element(a.gpus.begin(), a.gpus.end()) + 1, -1);
  if (madpipe::has_uniform_links(platform)) {
    int next = 0;
    for (int& gpu : a.gpus) {
      if (renumber[gpu] < 0) renumber[gpu] = next++;
      gpu = renumber[gpu];
    }
    return merge_neighbours(a);
  }
  const int per_node = platform.gpus_per_node;
  const bool alike_nodes = platform.gpus % per_node == 0;
  std::vector<int> node_renumber(madpipe::num_nodes(platform), -1);
  std::vector<int> used_in_node(node_renumber.size(), 0);
  int next_node = 0;
  for (int& gpu : a.gpus) {
    if (renumber[gpu] < 0) {
      const int node = madpipe::node_of(platform, gpu);
      if (node_renumber[node] < 0) node_renumber[node] = alike_nodes ? next_node++ : node;
      const int target = node_renumber[node];
      renumber[gpu] = target * per_node + used_in_node[target]++;
    }
    gpu = renumber[gpu];
  }
  return merge_neighbours(a);
}

static std::vector<Allocation> neighbours(const Allocation& a, int num_layers,
                                          const madpipe::Platform& platform) {
  std::vector<Allocation> out;
  const int num_gpus = platform.gpus;
  const int stages = static_cast<int>(a.gpus.size());
  // On a platform whose links differ: exchange the stages of two GPUs of different nodes (one of
  // them may be idle), which moves boundaries into or out of a node.
  if (!madpipe::has_uniform_links(platform)) {
    std::vector<bool> used(num_gpus, false);
    for (int g : a.gpus) used[g] = true;
    for (int x = 0; x < num_gpus; ++x)
      for (int y = x + 1; y < num_gpus; ++y) {
        if (!(used[x] || used[y]) || madpipe::node_of(platform, x) == madpipe::node_of(platform, y))
          continue;
        Allocation b = a;
        for (int& g : b.gpus) g = g == x ? y : g == y ? x : g;
        out.push_back(b);
      }
  }
  auto last_of = [&](int s) { return s + 1 < stages ? a.first_layers[s + 1] - 1 : num_layers - 1; };
  // Move each inner boundary by one layer either way.
  for (int s = 1; s < stages; ++s) {
    for (int delta : {-1, 1}) {
      Allocation b = a;
      b.first_layers[s] += delta;
      if (b.first_layers[s] <= b.first_layers[s - 1] || b.first_layers[s] > last_of(s)) continue;
      out.push_back(b);
    }
  }
  // Move a stage to another GPU.
  for (int s = 0; s < stages; ++s)
    for (int g = 0; g < num_gpus; ++g) {
      if (g == a.gpus[s]) continue;
      Allocation b = a;
      b.gpus[s] = g;
      out.push_back(b);
    }
  // Split a stage in the middle of its load, the second half going to another GPU.
  for (int s = 0; s < stages; ++s) {
    const int first = a.first_layers[s], last = last_of(s);
    if (first == last) continue;
    const int cut = (first + last + 1) / 2;
    for (int g = 0; g < num_gpus; ++g) {
      if (g == a.gpus[s]) continue;
      Allocation b = a;
      b.first_layers.insert(b.first_layers.begin() + s + 1, cut);
      b.gpus.insert(b.gpus.begin() + s + 1, g);
      out.push_back(b);
    }
  }
  // Merge a stage into the previous one.
  for (int s = 1; s < stages; ++s) {
    Allocation b = a;
    b.first_layers.erase(b.first_layers.begin() + s);
    b.gpus.erase(b.gpus.begin() + s);
    out.push_back(b);
  }
  return out;
}

madpipe::partition::ScheduledAllocation madpipe::partition::refine_allocation(
    const ChainCosts& costs, const Platform& platform, ScheduledAllocation start,
    const RefineOptions& options, const std::function<void(const std::string&)>& progress) {
  ScheduledAllocation best = std::move(start);
  std::set<std::pair<std::vector<int>, std::vector<int>>> seen;
  best.allocation = canonical(best.allocation, platform);
  seen.insert({best.allocation.first_layers, best.allocation.gpus});
  int evaluations = 0;
  bool improved = true;
  auto at_bound = [&] {
    return best.scheduled.pattern.normalized_period_ms() <= options.lower_bound_ms * (1 + 1e-9);
  };
  while (improved && evaluations < options.max_evaluations && !at_bound()) {
    improved = false;
    for (const Allocation& raw : neighbours(best.allocation, costs.num_layers(), platform)) {
      const Allocation candidate = canonical(raw, platform);
      if (!seen.insert({candidate.first_layers, candidate.gpus}).second) continue;
      if (++evaluations > options.max_evaluations) break;
      if (options.out_of_time && options.out_of_time()) {
        best.cut = true;
        return best;
      }
      schedule::ScheduleSearchOptions bounded = options.search;
      bounded.give_up_at_ms = best.scheduled.pattern.normalized_period_ms() * (1 - 1e-6);
      const auto scheduled =
          schedule::schedule_under_memory(stages_of(costs, candidate), platform, bounded);
      if (!scheduled || scheduled->pattern.normalized_period_ms() >=
                            best.scheduled.pattern.normalized_period_ms() * (1 - 1e-6))
        continue;
      best = ScheduledAllocation{candidate, *scheduled};
      improved = true;
      if (progress) {
        std::ostringstream line;
        line << "refine: " << format_ms(scheduled->pattern.normalized_period_ms()) << " with "
             << candidate.gpus.size() << " stages via " << scheduled->method << " (" << evaluations
             << " schedules tried)";
        progress(line.str());
      }
      break;
    }
  }
  return best;
}
