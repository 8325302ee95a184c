// The address ILP of address_plan.hpp (ilp_address_plan), optionally around a pyramid.

#include "arena/address_plan.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "solver/linear_expr.hpp"
#include "solver/model.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace {
using madpipe::arena::AddressPlan;
using madpipe::arena::Buffer;
namespace solver = madpipe::solver;

// The address ILP on sizes divided by `unit_`, and its decoding. Buffers with a fixed offset
// (>= 0 in `fixed`) are constants: no variable, and no order binary between two of them.
class AddressIlp {
 public:
  AddressIlp(const std::vector<Buffer>& buffers, const std::vector<std::int64_t>& fixed,
             const AddressPlan& start)
      : buffers_(buffers),
        fixed_(fixed.empty() ? std::vector<std::int64_t>(buffers.size(), -1) : fixed),
        pairs_(madpipe::arena::coexisting_buffer_pairs(buffers)) {
    for (const Buffer& b : buffers)
      if (b.size_bytes > 0) unit_ = std::gcd(unit_, b.size_bytes);
    if (unit_ == 0) unit_ = 1;
    const double big = scaled(start.arena_bytes);
    double lowest_peak = scaled(start.lower_bound_bytes);
    for (std::size_t e = 0; e < buffers.size(); ++e)
      if (fixed_[e] >= 0)
        lowest_peak = std::max(lowest_peak, scaled(fixed_[e] + buffers[e].size_bytes));
    peak_ = model_.add_var(lowest_peak, big, false, "peak");
    model_.set_objective(peak_, 1.0);
    model_.set_hint(peak_, big);
    for (std::size_t e = 0; e < buffers.size(); ++e) {
      if (fixed_[e] >= 0) {
        address_.emplace_back(scaled(fixed_[e]));
        continue;
      }
      const double size = scaled(buffers[e].size_bytes);
      const solver::Var a = model_.add_var(0, big - size, false, "A_" + std::to_string(e));
      model_.set_hint(a, scaled(start.offsets[e]));
      address_.emplace_back(a);
      solver::add_constraint(model_, address_.back() + size - peak_, -solver::kInf, 0,
                             "top_" + std::to_string(e));
    }
    for (const auto& [i, j] : pairs_) {
      if (fixed_[static_cast<std::size_t>(i)] >= 0 && fixed_[static_cast<std::size_t>(j)] >= 0) {
        order_.emplace_back();
        continue;
      }
      const std::string tag = std::to_string(i) + "_" + std::to_string(j);
      const solver::Var below = model_.add_var(0, 1, true, "z_" + tag);  // 1: i below j
      order_.push_back(below);
      model_.set_hint(below, start.offsets[static_cast<std::size_t>(i)] <
                                     start.offsets[static_cast<std::size_t>(j)]
                                 ? 1.0
                                 : 0.0);
      const double si = scaled(buffers[static_cast<std::size_t>(i)].size_bytes);
      const double sj = scaled(buffers[static_cast<std::size_t>(j)].size_bytes);
      const solver::LinearExpr& ai = address_[static_cast<std::size_t>(i)];
      const solver::LinearExpr& aj = address_[static_cast<std::size_t>(j)];
      // z = 1: A_i + S_i <= A_j;  z = 0: A_j + S_j <= A_i.
      solver::add_constraint(model_, ai + si - aj + big * solver::LinearExpr(below), -solver::kInf,
                             big, "below_" + tag);
      solver::add_constraint(model_, aj + sj - ai - big * solver::LinearExpr(below), -solver::kInf,
                             0, "above_" + tag);
    }
  }

  const solver::Model& model() const { return model_; }

  // Integral offsets from the solved order of every pair: a longest path over "i below j" edges
  // (Kahn's order). Empty when the order has a cycle. Fixed buffers may move down, never up.
  std::vector<std::int64_t> decode(const std::vector<double>& values) const {
    const std::size_t n = buffers_.size();
    std::vector<std::vector<int>> above(n);
    std::vector<int> indegree(n, 0);
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      auto [low, high] = pairs_[p];
      const bool i_below =
          order_[p].index >= 0
              ? values[static_cast<std::size_t>(order_[p].index)] >= 0.5
              : fixed_[static_cast<std::size_t>(low)] < fixed_[static_cast<std::size_t>(high)];
      if (!i_below) std::swap(low, high);
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
      const std::int64_t end =
          offsets[static_cast<std::size_t>(e)] + buffers_[static_cast<std::size_t>(e)].size_bytes;
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
  double scaled(std::int64_t bytes) const { return static_cast<double>(bytes / unit_); }

  const std::vector<Buffer>& buffers_;
  std::vector<std::int64_t> fixed_;
  std::vector<std::pair<int, int>> pairs_;
  std::int64_t unit_ = 0;
  solver::Model model_;
  solver::Var peak_;
  std::vector<solver::LinearExpr> address_;  // a variable, or a constant when fixed
  std::vector<solver::Var> order_;           // per pair; index -1 between two fixed buffers
};
}  // namespace

// Offsets of the pyramid's buffers (-1 for the others).
static std::vector<std::int64_t> pyramid_offsets(const std::vector<Buffer>& buffers) {
  std::vector<std::int64_t> offsets(buffers.size(), -1);
  std::int64_t base = 0;
  for (int pick : madpipe::arena::pyramid_stack(buffers)) {
    offsets[static_cast<std::size_t>(pick)] = base;
    base += buffers[static_cast<std::size_t>(pick)].size_bytes;
  }
  return offsets;
}

madpipe::arena::AddressPlan madpipe::arena::ilp_address_plan(const std::vector<Buffer>& buffers,
                                                             const AddressIlpOptions& options) {
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
  const std::vector<std::int64_t> fixed =
      options.pyramid ? pyramid_offsets(buffers) : std::vector<std::int64_t>{};
  const AddressPlan start = options.pyramid ? best_greedy_address_plan(buffers, fixed) : greedy;
  const AddressIlp ilp(buffers, fixed, start);
  solver::SolveResult result = solver::make_backend(backend)->solve(ilp.model(), options.solve);
  greedy.solver_status = result.status;
  greedy.solver_seconds = result.seconds;
  const std::string method = options.pyramid ? "pyramid + ilp " : "ilp ";
  if (!result.has_solution()) {
    std::string why = method + std::string(solver::to_string(result.status));
    if (!result.message.empty()) why += " (" + result.message + ")";
    return fallback(why);
  }
  AddressPlan plan = greedy;
  plan.offsets = ilp.decode(result.values);
  if (plan.offsets.empty()) return fallback(method + "solution has an inconsistent order");
  plan.arena_bytes = 0;
  for (std::size_t e = 0; e < buffers.size(); ++e)
    plan.arena_bytes = std::max(plan.arena_bytes, plan.offsets[e] + buffers[e].size_bytes);
  if (!overlapping_live_buffers(plan).empty())
    return fallback(method + "solution overlaps live buffers");
  if (plan.arena_bytes > greedy.arena_bytes)
    return fallback(method + "solution (" + std::to_string(plan.arena_bytes) +
                    " bytes) is worse than greedy");
  plan.method = PlanMethod::Ilp;
  plan.note = method + std::string(solver::to_string(result.status)) + " (" + result.backend;
  if (result.status != solver::Status::Optimal) plan.note += ", gap " + format_percent(result.gap);
  plan.note += plan.arena_bytes == plan.lower_bound_bytes ? ", meets the lower bound)" : ")";
  return plan;
}
