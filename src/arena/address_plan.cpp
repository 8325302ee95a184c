#include "arena/address_plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <climits>
#include <numeric>

std::vector<madpipe::arena::Buffer> madpipe::arena::buffers_of(const TensorGraph& graph) {
  check_tensor_graph(graph);
  std::vector<Buffer> buffers;
  for (const Tensor& tensor : graph.tensors) {
    Buffer buffer{tensor.name, tensor.size_bytes, std::max(tensor.producer, 0), 0};
    buffer.last = buffer.first;
    for (int consumer : tensor.consumers) buffer.last = std::max(buffer.last, consumer);
    buffers.push_back(std::move(buffer));
  }
  return buffers;
}

std::int64_t madpipe::arena::live_bytes_lower_bound(const std::vector<Buffer>& buffers) {
  int horizon = 0;
  for (const Buffer& b : buffers) horizon = std::max({horizon, b.first + 1, b.last + 1});
  // A wrapping buffer is live from its first timestep on, and from 0 to its last one.
  std::vector<std::int64_t> change(static_cast<std::size_t>(horizon) + 1, 0);
  for (const Buffer& b : buffers) {
    change[static_cast<std::size_t>(b.first)] += b.size_bytes;
    if (wraps(b)) change[0] += b.size_bytes;
    change[static_cast<std::size_t>(b.last) + 1] -= b.size_bytes;
  }
  std::int64_t live = 0, peak = 0;
  for (std::int64_t c : change) peak = std::max(peak, live += c);
  return peak;
}

const char* madpipe::arena::to_string(PlanMethod method) {
  switch (method) {
    case PlanMethod::GreedyByStart:
      return "greedy-by-start";
    case PlanMethod::GreedyLargestFirst:
      return "greedy-largest-first";
    case PlanMethod::Ilp:
      return "ilp";
  }
  MADPIPE_UNREACHABLE("plan method");
}

std::int64_t madpipe::arena::AddressPlan::sum_bytes() const noexcept {
  std::int64_t sum = 0;
  for (const Buffer& b : buffers) sum += b.size_bytes;
  return sum;
}

std::vector<std::pair<int, int>> madpipe::arena::coexisting_buffer_pairs(
    const std::vector<Buffer>& buffers) {
  // Linear buffers by a sweep in order of first use; a wrapping one against every other.
  std::vector<int> linear, wrapping;
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
    const Buffer& b = buffers[static_cast<std::size_t>(i)];
    if (b.size_bytes > 0) (wraps(b) ? wrapping : linear).push_back(i);
  }
  std::stable_sort(linear.begin(), linear.end(), [&](int a, int b) {
    return buffers[static_cast<std::size_t>(a)].first < buffers[static_cast<std::size_t>(b)].first;
  });
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < linear.size(); ++i) {
    const Buffer& a = buffers[static_cast<std::size_t>(linear[i])];
    for (std::size_t j = i + 1; j < linear.size(); ++j) {
      if (buffers[static_cast<std::size_t>(linear[j])].first > a.last) break;
      pairs.emplace_back(std::min(linear[i], linear[j]), std::max(linear[i], linear[j]));
    }
  }
  for (std::size_t i = 0; i < wrapping.size(); ++i) {
    const Buffer& a = buffers[static_cast<std::size_t>(wrapping[i])];
    for (std::size_t j = i + 1; j < wrapping.size(); ++j)
      pairs.emplace_back(std::min(wrapping[i], wrapping[j]), std::max(wrapping[i], wrapping[j]));
    for (int other : linear)
      if (live_together(a, buffers[static_cast<std::size_t>(other)]))
        pairs.emplace_back(std::min(wrapping[i], other), std::max(wrapping[i], other));
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

std::vector<madpipe::arena::BufferConflict> madpipe::arena::overlapping_live_buffers(
    const AddressPlan& plan) {
  std::vector<BufferConflict> conflicts;
  const auto& buffers = plan.buffers;
  if (plan.offsets.size() != buffers.size()) return {{-1, -1}};
  auto offset = [&](int i) { return plan.offsets[static_cast<std::size_t>(i)]; };
  auto size = [&](int i) { return buffers[static_cast<std::size_t>(i)].size_bytes; };
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i)
    if (offset(i) < 0 || offset(i) + size(i) > plan.arena_bytes) conflicts.push_back({i, i});
  for (const auto& [a, b] : coexisting_buffer_pairs(buffers))
    if (offset(a) < offset(b) + size(b) && offset(b) < offset(a) + size(a))
      conflicts.push_back({a, b});
  return conflicts;
}

static void finish_plan(madpipe::arena::AddressPlan& plan) {
  plan.arena_bytes = 0;
  for (std::size_t i = 0; i < plan.buffers.size(); ++i)
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[i] + plan.buffers[i].size_bytes);
  plan.lower_bound_bytes = madpipe::arena::live_bytes_lower_bound(plan.buffers);
}

// First fit in `sequence` order, the fixed buffers placed first.
static madpipe::arena::AddressPlan first_fit(const std::vector<madpipe::arena::Buffer>& buffers,
                                             const std::vector<int>& sequence,
                                             const std::vector<std::int64_t>& fixed_offsets) {
  using madpipe::arena::Buffer;
  auto fixed = [&](int i) {
    return fixed_offsets.empty() ? std::int64_t{-1} : fixed_offsets[static_cast<std::size_t>(i)];
  };
  madpipe::arena::AddressPlan plan;
  plan.buffers = buffers;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<int> placed;
  for (int i : sequence) {
    if (fixed(i) < 0) continue;
    plan.offsets[static_cast<std::size_t>(i)] = fixed(i);
    placed.push_back(i);
  }
  for (int i : sequence) {
    const Buffer& b = buffers[static_cast<std::size_t>(i)];
    if (b.size_bytes == 0 || fixed(i) >= 0) continue;
    std::vector<std::pair<std::int64_t, std::int64_t>> taken;  // [begin, end) of live neighbours
    for (int p : placed) {
      const Buffer& other = buffers[static_cast<std::size_t>(p)];
      if (live_together(b, other))
        taken.emplace_back(plan.offsets[static_cast<std::size_t>(p)],
                           plan.offsets[static_cast<std::size_t>(p)] + other.size_bytes);
    }
    std::sort(taken.begin(), taken.end());
    std::int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + b.size_bytes <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[static_cast<std::size_t>(i)] = offset;
    placed.push_back(i);
  }
  finish_plan(plan);
  return plan;
}

// The buffers by first use counted from timestep `origin` of a circle of `circle` timesteps, those
// live across the origin first (the latest started first: on the shipped stages it fragments
// less than the earliest first), larger first on ties.
static std::vector<int> by_start_from(const std::vector<madpipe::arena::Buffer>& buffers,
                                      int origin, int circle) {
  auto key = [&](int i) {
    const madpipe::arena::Buffer& b = buffers[static_cast<std::size_t>(i)];
    const int from_origin = ((b.first - origin) % circle + circle) % circle;
    const bool crosses =
        b.first != origin && madpipe::arena::live_together(b, {"", 0, origin, origin});
    return std::make_tuple(crosses ? 0 : 1, crosses ? -from_origin : from_origin, -b.size_bytes);
  };
  std::vector<int> sequence(buffers.size());
  std::iota(sequence.begin(), sequence.end(), 0);
  std::stable_sort(sequence.begin(), sequence.end(), [&](int a, int b) { return key(a) < key(b); });
  return sequence;
}

madpipe::arena::AddressPlan madpipe::arena::greedy_address_plan(
    const std::vector<Buffer>& buffers, PlanMethod order,
    const std::vector<std::int64_t>& fixed_offsets) {
  if (order == PlanMethod::Ilp) throw_invalid("", "order", "the ILP is not a greedy order");
  if (!fixed_offsets.empty() && fixed_offsets.size() != buffers.size())
    throw_invalid("", "fixed_offsets", "must have one entry per buffer");
  AddressPlan best;
  if (order == PlanMethod::GreedyLargestFirst) {
    std::vector<int> sequence(buffers.size());
    std::iota(sequence.begin(), sequence.end(), 0);
    auto key = [&](int i) {
      const Buffer& b = buffers[static_cast<std::size_t>(i)];
      return std::make_tuple(-b.size_bytes, std::int64_t{b.first} - b.last, std::int64_t{b.first});
    };
    std::stable_sort(sequence.begin(), sequence.end(),
                     [&](int a, int b) { return key(a) < key(b); });
    best = first_fit(buffers, sequence, fixed_offsets);
  } else {
    // On a circle there is no first timestep: every start is tried as the origin.
    int circle = 1;
    for (const Buffer& b : buffers) circle = std::max({circle, b.first + 1, b.last + 1});
    std::vector<int> origins = {0};
    if (std::any_of(buffers.begin(), buffers.end(), [](const Buffer& b) { return wraps(b); }))
      for (const Buffer& b : buffers) origins.push_back(b.first);
    std::sort(origins.begin(), origins.end());
    origins.erase(std::unique(origins.begin(), origins.end()), origins.end());
    for (int origin : origins) {
      AddressPlan plan = first_fit(buffers, by_start_from(buffers, origin, circle), fixed_offsets);
      if (best.offsets.empty() || plan.arena_bytes < best.arena_bytes) best = std::move(plan);
    }
  }
  best.method = order;
  return best;
}

madpipe::arena::AddressPlan madpipe::arena::best_greedy_address_plan(
    const std::vector<Buffer>& buffers, const std::vector<std::int64_t>& fixed_offsets) {
  AddressPlan by_start = greedy_address_plan(buffers, PlanMethod::GreedyByStart, fixed_offsets);
  AddressPlan largest = greedy_address_plan(buffers, PlanMethod::GreedyLargestFirst, fixed_offsets);
  return largest.arena_bytes < by_start.arena_bytes ? largest : by_start;
}

std::vector<int> madpipe::arena::pyramid_stack(const std::vector<Buffer>& buffers) {
  std::vector<int> picks;
  std::vector<bool> done(buffers.size(), false);
  int min_start = INT_MIN, max_end = INT_MAX;
  for (;;) {
    int best = -1;
    for (int i = 0; i < static_cast<int>(buffers.size()); ++i) {
      const Buffer& b = buffers[static_cast<std::size_t>(i)];
      if (done[static_cast<std::size_t>(i)] || b.size_bytes == 0 || wraps(b)) continue;
      if (b.first < min_start || b.last > max_end) continue;
      if (best < 0) {
        best = i;
        continue;
      }
      const Buffer& top = buffers[static_cast<std::size_t>(best)];
      if (std::make_pair(b.last - b.first, b.size_bytes) >
          std::make_pair(top.last - top.first, top.size_bytes))
        best = i;
    }
    if (best < 0) return picks;
    done[static_cast<std::size_t>(best)] = true;
    picks.push_back(best);
    min_start = buffers[static_cast<std::size_t>(best)].first;
    max_end = buffers[static_cast<std::size_t>(best)].last;
  }
}
