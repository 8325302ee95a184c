#include "schedule/address_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "solver/model.hpp"

std::vector<madpipe::schedule::Buffer> madpipe::schedule::buffers_of(const TensorGraph& graph) {
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

std::int64_t madpipe::schedule::live_bytes_lower_bound(const std::vector<Buffer>& buffers) {
  int horizon = 0;
  for (const Buffer& b : buffers) horizon = std::max(horizon, b.last + 1);
  std::vector<std::int64_t> change(static_cast<std::size_t>(horizon) + 1, 0);
  for (const Buffer& b : buffers) {
    change[static_cast<std::size_t>(b.first)] += b.size_bytes;
    change[static_cast<std::size_t>(b.last) + 1] -= b.size_bytes;
  }
  std::int64_t live = 0, peak = 0;
  for (std::int64_t c : change) peak = std::max(peak, live += c);
  return peak;
}

const char* madpipe::schedule::to_string(PlanMethod method) {
  switch (method) {
    case PlanMethod::GreedyByStart: return "greedy-by-start";
    case PlanMethod::GreedyLargestFirst: return "greedy-largest-first";
    case PlanMethod::Ilp: return "ilp";
  }
  MADPIPE_UNREACHABLE("plan method");
}

std::int64_t madpipe::schedule::AddressPlan::sum_bytes() const noexcept {
  std::int64_t sum = 0;
  for (const Buffer& b : buffers) sum += b.size_bytes;
  return sum;
}

// Indices of the buffers sorted by first use (then by index): the sweep order of the checks.
static std::vector<int> by_first_use(const std::vector<madpipe::schedule::Buffer>& buffers) {
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return buffers[static_cast<std::size_t>(a)].first < buffers[static_cast<std::size_t>(b)].first;
  });
  return order;
}

// Pairs (a < b) of non-empty buffers live together.
static std::vector<std::pair<int, int>> coexisting_pairs(
    const std::vector<madpipe::schedule::Buffer>& buffers) {
  const std::vector<int> order = by_first_use(buffers);
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& a = buffers[static_cast<std::size_t>(order[i])];
    if (a.size_bytes == 0) continue;
    for (std::size_t j = i + 1; j < order.size(); ++j) {
      const auto& b = buffers[static_cast<std::size_t>(order[j])];
      if (b.first > a.last) break;
      if (b.size_bytes == 0) continue;
      pairs.emplace_back(std::min(order[i], order[j]), std::max(order[i], order[j]));
    }
  }
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

std::vector<madpipe::schedule::BufferConflict> madpipe::schedule::overlapping_live_buffers(
    const AddressPlan& plan) {
  std::vector<BufferConflict> conflicts;
  const auto& buffers = plan.buffers;
  if (plan.offsets.size() != buffers.size()) return {{-1, -1}};
  auto offset = [&](int i) { return plan.offsets[static_cast<std::size_t>(i)]; };
  auto size = [&](int i) { return buffers[static_cast<std::size_t>(i)].size_bytes; };
  for (int i = 0; i < static_cast<int>(buffers.size()); ++i)
    if (offset(i) < 0 || offset(i) + size(i) > plan.arena_bytes) conflicts.push_back({i, i});
  for (const auto& [a, b] : coexisting_pairs(buffers))
    if (offset(a) < offset(b) + size(b) && offset(b) < offset(a) + size(a))
      conflicts.push_back({a, b});
  return conflicts;
}

static void finish_plan(madpipe::schedule::AddressPlan& plan) {
  plan.arena_bytes = 0;
  for (std::size_t i = 0; i < plan.buffers.size(); ++i)
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[i] + plan.buffers[i].size_bytes);
  plan.lower_bound_bytes = madpipe::schedule::live_bytes_lower_bound(plan.buffers);
}

madpipe::schedule::AddressPlan madpipe::schedule::greedy_address_plan(
    const std::vector<Buffer>& buffers, PlanMethod order) {
  if (order == PlanMethod::Ilp) throw_invalid("", "order", "the ILP is not a greedy order");
  std::vector<int> sequence(buffers.size());
  std::iota(sequence.begin(), sequence.end(), 0);
  auto key = [&](int i) {
    const Buffer& b = buffers[static_cast<std::size_t>(i)];
    return order == PlanMethod::GreedyByStart
               ? std::make_tuple(std::int64_t{b.first}, -b.size_bytes, std::int64_t{0})
               : std::make_tuple(-b.size_bytes, std::int64_t{b.first} - b.last,
                                 std::int64_t{b.first});
  };
  std::stable_sort(sequence.begin(), sequence.end(), [&](int a, int b) { return key(a) < key(b); });
  AddressPlan plan;
  plan.buffers = buffers;
  plan.method = order;
  plan.offsets.assign(buffers.size(), 0);
  std::vector<int> placed;
  for (int i : sequence) {
    const Buffer& b = buffers[static_cast<std::size_t>(i)];
    if (b.size_bytes == 0) continue;
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

madpipe::schedule::AddressPlan madpipe::schedule::best_greedy_address_plan(
    const std::vector<Buffer>& buffers) {
  AddressPlan by_start = greedy_address_plan(buffers, PlanMethod::GreedyByStart);
  AddressPlan largest = greedy_address_plan(buffers, PlanMethod::GreedyLargestFirst);
  return largest.arena_bytes < by_start.arena_bytes ? largest : by_start;
}

namespace {
using madpipe::schedule::AddressPlan;
using madpipe::schedule::Buffer;
namespace solver = madpipe::solver;

// The address ILP on sizes divided by `unit`, and its decoding.
class AddressIlp {
 public:
  AddressIlp(const std::vector<Buffer>& buffers, const AddressPlan& start)
      : buffers_(buffers), pairs_(coexisting_pairs(buffers)) {
    for (const Buffer& b : buffers)
      if (b.size_bytes > 0) unit_ = std::gcd(unit_, b.size_bytes);
    const double big = scaled(start.arena_bytes);
    peak_ = model_.add_var(scaled(start.lower_bound_bytes), big, false, "peak");
    model_.set_objective(peak_, 1.0);
    model_.set_hint(peak_, big);
    for (std::size_t e = 0; e < buffers.size(); ++e) {
      const double size = scaled(buffers[e].size_bytes);
      address_.push_back(model_.add_var(0, big - size, false, "A_" + std::to_string(e)));
      model_.set_hint(address_.back(), scaled(start.offsets[e]));
      const solver::Row top = model_.add_row(-solver::kInf, -size, "top_" + std::to_string(e));
      model_.add_term(top, address_.back(), 1.0);
      model_.add_term(top, peak_, -1.0);
    }
    for (const auto& [i, j] : pairs_) {
      const std::string tag = std::to_string(i) + "_" + std::to_string(j);
      const solver::Var below = model_.add_var(0, 1, true, "z_" + tag);  // 1: i below j
      order_.push_back(below);
      model_.set_hint(below, start.offsets[static_cast<std::size_t>(i)] <
                                     start.offsets[static_cast<std::size_t>(j)]
                                 ? 1.0
                                 : 0.0);
      const double si = scaled(buffers[static_cast<std::size_t>(i)].size_bytes);
      const double sj = scaled(buffers[static_cast<std::size_t>(j)].size_bytes);
      // z = 1: A_i + S_i <= A_j;  z = 0: A_j + S_j <= A_i.
      const solver::Row r1 = model_.add_row(-solver::kInf, big - si, "below_" + tag);
      model_.add_term(r1, address(i), 1.0);
      model_.add_term(r1, address(j), -1.0);
      model_.add_term(r1, below, big);
      const solver::Row r2 = model_.add_row(-solver::kInf, -sj, "above_" + tag);
      model_.add_term(r2, address(j), 1.0);
      model_.add_term(r2, address(i), -1.0);
      model_.add_term(r2, below, -big);
    }
  }

  const solver::Model& model() const { return model_; }

  // Integral offsets from the solved order of every pair: a longest path over "i below j" edges
  // (Kahn's order). Empty when the order has a cycle.
  std::vector<std::int64_t> decode(const std::vector<double>& values) const {
    const std::size_t n = buffers_.size();
    std::vector<std::vector<int>> above(n);
    std::vector<int> indegree(n, 0);
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      auto [low, high] = pairs_[p];
      if (values[static_cast<std::size_t>(order_[p].index)] < 0.5) std::swap(low, high);
      above[static_cast<std::size_t>(low)].push_back(high);
      ++indegree[static_cast<std::size_t>(high)];
    }
    std::vector<std::int64_t> offsets(n, 0);
    std::vector<int> ready;
    for (std::size_t e = 0; e < n; ++e)
      if (indegree[e] == 0) ready.push_back(static_cast<int>(e));
    std::size_t done = 0;
    while (!ready.empty()) {
      const int e = ready.back();
      ready.pop_back();
      ++done;
      const std::int64_t end = offsets[static_cast<std::size_t>(e)] +
                               buffers_[static_cast<std::size_t>(e)].size_bytes;
      for (int next : above[static_cast<std::size_t>(e)]) {
        offsets[static_cast<std::size_t>(next)] =
            std::max(offsets[static_cast<std::size_t>(next)], end);
        if (--indegree[static_cast<std::size_t>(next)] == 0) ready.push_back(next);
      }
    }
    if (done != n) return {};
    return offsets;
  }

 private:
  double scaled(std::int64_t bytes) const {
    return static_cast<double>(bytes / unit_);
  }
  solver::Var address(int e) const { return address_[static_cast<std::size_t>(e)]; }

  const std::vector<Buffer>& buffers_;
  std::vector<std::pair<int, int>> pairs_;
  std::int64_t unit_ = 0;
  solver::Model model_;
  solver::Var peak_;
  std::vector<solver::Var> address_, order_;
};
}  // namespace

static std::string percent(double ratio) {
  std::ostringstream out;
  out.precision(2);
  out << std::fixed << 100.0 * ratio << "%";
  return out.str();
}

madpipe::schedule::AddressPlan madpipe::schedule::ilp_address_plan(
    const std::vector<Buffer>& buffers, const AddressIlpOptions& options) {
  AddressPlan greedy = best_greedy_address_plan(buffers);
  auto fallback = [&](const std::string& why) {
    greedy.note = why + "; greedy plan kept";
    return greedy;
  };
  if (options.skip_when_greedy_optimal && greedy.arena_bytes == greedy.lower_bound_bytes) {
    greedy.note = "greedy meets the lower bound (optimal); no ILP solved";
    return greedy;
  }
  std::string backend = options.backend;
  if (backend.empty()) {
    const std::vector<std::string> built = solver::built_backends();
    if (built.empty()) return fallback("no MILP backend built");
    backend = built.front();
  }
  const AddressIlp ilp(buffers, greedy);
  solver::SolveResult result = solver::make_backend(backend)->solve(ilp.model(), options.solve);
  greedy.solver_status = result.status;
  greedy.solver_seconds = result.seconds;
  if (!result.has_solution()) {
    std::string why = "ilp " + std::string(solver::to_string(result.status));
    if (!result.message.empty()) why += " (" + result.message + ")";
    return fallback(why);
  }
  AddressPlan plan = greedy;
  plan.offsets = ilp.decode(result.values);
  if (plan.offsets.empty()) return fallback("ilp solution has an inconsistent order");
  finish_plan(plan);
  if (!overlapping_live_buffers(plan).empty())
    return fallback("ilp solution overlaps live buffers");
  if (plan.arena_bytes > greedy.arena_bytes) return fallback("ilp solution is worse than greedy");
  plan.method = PlanMethod::Ilp;
  plan.note = "ilp " + std::string(solver::to_string(result.status)) + " (" + result.backend;
  if (result.status != solver::Status::Optimal) plan.note += ", gap " + percent(result.gap);
  plan.note += plan.arena_bytes == plan.lower_bound_bytes ? ", meets the lower bound)" : ")";
  return plan;
}
