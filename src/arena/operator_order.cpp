#include "arena/operator_order.hpp"

#include "arena/lifetime_windows.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "solver/model.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

std::int64_t madpipe::arena::resident_peak_bytes(const TensorGraph& graph,
                                                 const std::vector<int>& order) {
  std::vector<int> step(graph.nodes.size(), 0);
  for (std::size_t i = 0; i < order.size(); ++i)
    step[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  std::vector<std::int64_t> resident(order.size() + 1, 0);
  for (const Tensor& tensor : graph.tensors) {
    const int made = tensor.producer < 0 ? 0 : step[static_cast<std::size_t>(tensor.producer)];
    int freed = made;
    for (int consumer : tensor.consumers)
      freed = std::max(freed, step[static_cast<std::size_t>(consumer)]);
    for (int t = made; t <= freed; ++t) resident[static_cast<std::size_t>(t)] += tensor.size_bytes;
  }
  return *std::max_element(resident.begin(), resident.end());
}

std::string madpipe::arena::order_problem(const TensorGraph& graph, const std::vector<int>& order) {
  const int n = static_cast<int>(graph.nodes.size());
  if (static_cast<int>(order.size()) != n)
    return "has " + std::to_string(order.size()) + " nodes, the graph " + std::to_string(n);
  std::vector<int> step(static_cast<std::size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    const int v = order[static_cast<std::size_t>(i)];
    if (v < 0 || v >= n || step[static_cast<std::size_t>(v)] >= 0)
      return "node index " + std::to_string(v) + " is out of range or repeated";
    step[static_cast<std::size_t>(v)] = i;
  }
  auto name = [&](int v) { return graph.nodes[static_cast<std::size_t>(v)].name; };
  for (const Tensor& tensor : graph.tensors) {
    if (tensor.producer < 0) continue;
    for (int consumer : tensor.consumers)
      if (step[static_cast<std::size_t>(consumer)] <=
          step[static_cast<std::size_t>(tensor.producer)])
        return name(consumer) + " runs before " + name(tensor.producer) + ", which makes " +
               tensor.name;
  }
  for (const OrderEdge& edge : graph.order_edges)
    if (step[static_cast<std::size_t>(edge.after)] <= step[static_cast<std::size_t>(edge.before)])
      return name(edge.after) + " runs before " + name(edge.before);
  return "";
}

madpipe::arena::TensorGraph madpipe::arena::reorder(const TensorGraph& graph,
                                                    const std::vector<int>& order) {
  const std::string problem = order_problem(graph, order);
  if (!problem.empty()) throw_invalid("", "order", problem);
  std::vector<int> step(graph.nodes.size(), 0);
  TensorGraph result;
  for (std::size_t i = 0; i < order.size(); ++i) {
    step[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
    result.nodes.push_back(graph.nodes[static_cast<std::size_t>(order[i])]);
  }
  auto moved = [&](int v) { return v < 0 ? v : step[static_cast<std::size_t>(v)]; };
  for (Tensor tensor : graph.tensors) {
    tensor.producer = moved(tensor.producer);
    for (int& consumer : tensor.consumers) consumer = moved(consumer);
    result.tensors.push_back(std::move(tensor));
  }
  for (const OrderEdge& edge : graph.order_edges)
    result.order_edges.push_back({moved(edge.before), moved(edge.after)});
  check_tensor_graph(result);
  return result;
}

std::int64_t madpipe::arena::op_lower_bound_bytes(const TensorGraph& graph) {
  std::vector<std::int64_t> touched(graph.nodes.size(), 0);
  for (const Tensor& tensor : graph.tensors) {
    if (tensor.producer >= 0)
      touched[static_cast<std::size_t>(tensor.producer)] += tensor.size_bytes;
    for (int consumer : tensor.consumers)
      touched[static_cast<std::size_t>(consumer)] += tensor.size_bytes;
  }
  return touched.empty() ? 0 : *std::max_element(touched.begin(), touched.end());
}

namespace {
using madpipe::arena::LifetimeWindows;
using madpipe::arena::Tensor;
using madpipe::arena::TensorGraph;
using madpipe::arena::TimeWindow;
namespace solver = madpipe::solver;

// OLLA's time-indexed lifetime ILP (ilp_operator_order) on the windows, sizes divided by `unit_`.
class OrderIlp {
 public:
  OrderIlp(const TensorGraph& graph, const LifetimeWindows& windows, std::int64_t lower_bound,
           std::int64_t upper_bound)
      : graph_(graph), windows_(windows) {
    for (const Tensor& tensor : graph.tensors)
      if (tensor.size_bytes > 0) unit_ = std::gcd(unit_, tensor.size_bytes);
    if (unit_ == 0) unit_ = 1;
    const int horizon = windows.horizon;
    peak_ = model_.add_var(scaled(lower_bound), scaled(upper_bound), false, "peak");
    model_.set_objective(peak_, 1.0);
    add_execution_vars();
    add_preserve_vars();
    add_dependency_rows();
    for (std::size_t e = 0; e < graph.tensors.size(); ++e) add_lifetime_rows(static_cast<int>(e));
    for (int t = 0; t < horizon; ++t) add_memory_row(t);
  }

  const solver::Model& model() const { return model_; }
  int execute_vars() const { return execute_count_; }
  int preserve_vars() const { return preserve_count_; }

  // MIP start: the graph's own order, one node per timestep (needs horizon >= nodes).
  void hint_given_order(std::int64_t peak) {
    model_.set_hint(peak_, scaled(peak));
    for (std::size_t v = 0; v < execute_.size(); ++v)
      for (int t = windows_.span[v].first; t <= windows_.span[v].last; ++t)
        model_.set_hint(x(static_cast<int>(v), t), t == static_cast<int>(v) ? 1.0 : 0.0);
    for (std::size_t e = 0; e < graph_.tensors.size(); ++e) {
      const Tensor& tensor = graph_.tensors[e];
      if (tensor.consumers.empty()) continue;
      const int last = *std::max_element(tensor.consumers.begin(), tensor.consumers.end());
      for (int t = windows_.mul[e].first; t <= windows_.mul[e].last; ++t)
        model_.set_hint(p(static_cast<int>(e), t), t > tensor.producer && t <= last ? 1.0 : 0.0);
    }
  }

  // Nodes by the timestep where they run, ties in index order.
  std::vector<int> decode(const std::vector<double>& values) const {
    std::vector<std::pair<int, int>> timed;
    for (std::size_t v = 0; v < execute_.size(); ++v) {
      int best = windows_.span[v].first;
      for (int t = windows_.span[v].first; t <= windows_.span[v].last; ++t)
        if (values[static_cast<std::size_t>(x(static_cast<int>(v), t).index)] >
            values[static_cast<std::size_t>(x(static_cast<int>(v), best).index)])
          best = t;
      timed.emplace_back(best, static_cast<int>(v));
    }
    std::sort(timed.begin(), timed.end());
    std::vector<int> order;
    for (const auto& entry : timed) order.push_back(entry.second);
    return order;
  }

 private:
  double scaled(std::int64_t bytes) const { return static_cast<double>(bytes / unit_); }
  solver::Var x(int v, int t) const {
    return execute_[static_cast<std::size_t>(v)]
                   [static_cast<std::size_t>(t - windows_.span[static_cast<std::size_t>(v)].first)];
  }
  bool has_p(int e, int t) const {
    return !preserve_[static_cast<std::size_t>(e)].empty() &&
           windows_.mul[static_cast<std::size_t>(e)].contains(t);
  }
  solver::Var p(int e, int t) const {
    return preserve_[static_cast<std::size_t>(e)]
                    [static_cast<std::size_t>(t - windows_.mul[static_cast<std::size_t>(e)].first)];
  }
  bool runs_at(int v, int t) const {
    return v >= 0 && windows_.span[static_cast<std::size_t>(v)].contains(t);
  }

  void add_execution_vars() {
    for (std::size_t v = 0; v < graph_.nodes.size(); ++v) {
      std::vector<solver::Var> vars;
      const solver::Row once = model_.add_row(1, 1, "once_" + std::to_string(v));
      for (int t = windows_.span[v].first; t <= windows_.span[v].last; ++t) {
        vars.push_back(
            model_.add_var(0, 1, true, "X_" + std::to_string(v) + "_" + std::to_string(t)));
        model_.add_term(once, vars.back(), 1.0);
      }
      execute_count_ += static_cast<int>(vars.size());
      execute_.push_back(std::move(vars));
    }
  }

  // Tensors without consumers live only while their producer runs: no P.
  void add_preserve_vars() {
    for (std::size_t e = 0; e < graph_.tensors.size(); ++e) {
      std::vector<solver::Var> vars;
      if (!graph_.tensors[e].consumers.empty()) {
        const TimeWindow& mul = windows_.mul[e];
        for (int t = mul.first; t <= mul.last; ++t)
          vars.push_back(model_.add_var(windows_.pres[e].contains(t) ? 1 : 0, 1, true,
                                        "P_" + std::to_string(e) + "_" + std::to_string(t)));
      }
      preserve_count_ += static_cast<int>(vars.size());
      preserve_.push_back(std::move(vars));
    }
  }

  // Inputs resident when a node runs, and order edges.
  void add_dependency_rows() {
    for (std::size_t e = 0; e < graph_.tensors.size(); ++e) {
      for (int consumer : graph_.tensors[e].consumers) {
        const TimeWindow& span = windows_.span[static_cast<std::size_t>(consumer)];
        for (int t = span.first; t <= span.last; ++t) {
          const solver::Row row =
              model_.add_row(-solver::kInf, 0,
                             "uses_" + std::to_string(e) + "_" + std::to_string(consumer) + "_" +
                                 std::to_string(t));
          model_.add_term(row, x(consumer, t), 1.0);
          if (has_p(static_cast<int>(e), t)) model_.add_term(row, p(static_cast<int>(e), t), -1.0);
        }
      }
    }
    for (std::size_t i = 0; i < graph_.order_edges.size(); ++i) {
      const auto& edge = graph_.order_edges[i];
      const solver::Row row = model_.add_row(1, solver::kInf, "after_" + std::to_string(i));
      for (int t = windows_.span[static_cast<std::size_t>(edge.after)].first;
           t <= windows_.span[static_cast<std::size_t>(edge.after)].last; ++t)
        model_.add_term(row, x(edge.after, t), t);
      for (int t = windows_.span[static_cast<std::size_t>(edge.before)].first;
           t <= windows_.span[static_cast<std::size_t>(edge.before)].last; ++t)
        model_.add_term(row, x(edge.before, t), -t);
    }
  }

  // Created or preserved, never both; preserved only if it existed before.
  void add_lifetime_rows(int e) {
    if (preserve_[static_cast<std::size_t>(e)].empty()) return;
    const int producer = graph_.tensors[static_cast<std::size_t>(e)].producer;
    const TimeWindow& mul = windows_.mul[static_cast<std::size_t>(e)];
    const std::string tag = std::to_string(e) + "_";
    for (int t = mul.first; t <= mul.last; ++t) {
      if (runs_at(producer, t)) {
        const solver::Row once =
            model_.add_row(-solver::kInf, 1, "made_or_kept_" + tag + std::to_string(t));
        model_.add_term(once, p(e, t), 1.0);
        model_.add_term(once, x(producer, t), 1.0);
      }
      if (producer < 0 && t == 0) continue;  // a stage input is there from the start
      const solver::Row kept = model_.add_row(-solver::kInf, 0, "kept_" + tag + std::to_string(t));
      model_.add_term(kept, p(e, t), 1.0);
      if (has_p(e, t - 1)) model_.add_term(kept, p(e, t - 1), -1.0);
      if (runs_at(producer, t - 1)) model_.add_term(kept, x(producer, t - 1), -1.0);
    }
  }

  // Everything made or kept at t fits under the peak.
  void add_memory_row(int t) {
    double constant = 0;
    for (const Tensor& tensor : graph_.tensors)
      if (tensor.producer < 0 && tensor.consumers.empty() && t == 0)
        constant += scaled(tensor.size_bytes);
    const solver::Row row = model_.add_row(-solver::kInf, -constant, "memory_" + std::to_string(t));
    model_.add_term(row, peak_, -1.0);
    std::vector<double> made(graph_.nodes.size(), 0.0);
    for (const Tensor& tensor : graph_.tensors)
      if (tensor.producer >= 0)
        made[static_cast<std::size_t>(tensor.producer)] += scaled(tensor.size_bytes);
    for (std::size_t v = 0; v < graph_.nodes.size(); ++v)
      if (made[v] > 0 && runs_at(static_cast<int>(v), t))
        model_.add_term(row, x(static_cast<int>(v), t), made[v]);
    for (std::size_t e = 0; e < graph_.tensors.size(); ++e)
      if (graph_.tensors[e].size_bytes > 0 && has_p(static_cast<int>(e), t))
        model_.add_term(row, p(static_cast<int>(e), t), scaled(graph_.tensors[e].size_bytes));
  }

  const TensorGraph& graph_;
  const LifetimeWindows& windows_;
  std::int64_t unit_ = 0;
  solver::Model model_;
  solver::Var peak_;
  std::vector<std::vector<solver::Var>> execute_, preserve_;
  int execute_count_ = 0, preserve_count_ = 0;
};
}  // namespace

// The order ILP on the whole graph.
static madpipe::arena::OperatorOrder order_whole_graph(
    const madpipe::arena::TensorGraph& graph, const madpipe::arena::OrderIlpOptions& options) {
  using namespace madpipe::arena;
  namespace solver = madpipe::solver;
  OperatorOrder result;
  result.order.resize(graph.nodes.size());
  std::iota(result.order.begin(), result.order.end(), 0);
  result.given_peak_bytes = resident_peak_bytes(graph, result.order);
  result.peak_bytes = result.given_peak_bytes;
  result.lower_bound_bytes = op_lower_bound_bytes(graph);
  auto keep_given = [&](const std::string& why, OrderOutcome outcome = OrderOutcome::Kept) {
    result.note = why + "; given order kept";
    result.outcome = outcome;
    return result;
  };
  const LifetimeWindows windows = lifetime_windows(graph, options.horizon);
  result.coexisting_pairs = static_cast<int>(may_coexist_pairs(graph, windows).size());
  if (options.skip_when_given_optimal) {
    if (result.given_peak_bytes == result.lower_bound_bytes)
      return keep_given("given order meets the lower bound (optimal), no ILP solved",
                        OrderOutcome::AtLowerBound);
    if (windows.horizon == static_cast<int>(graph.nodes.size()) &&
        std::all_of(windows.span.begin(), windows.span.end(),
                    [](const TimeWindow& w) { return w.size() == 1; }))
      return keep_given("the graph has one topological order, no ILP solved",
                        OrderOutcome::OnlyOrder);
  }
  std::string backend = options.backend;
  if (backend.empty()) {
    const std::vector<std::string> built = solver::built_backends();
    if (built.empty()) return keep_given("no MILP backend built");
    backend = built.front();
  }
  std::int64_t sum = 0;
  for (const Tensor& tensor : graph.tensors) sum += tensor.size_bytes;
  const bool given_fits = windows.horizon >= static_cast<int>(graph.nodes.size());
  OrderIlp ilp(graph, windows, result.lower_bound_bytes,
               given_fits ? result.given_peak_bytes : sum);
  if (given_fits) ilp.hint_given_order(result.given_peak_bytes);
  result.execute_vars = ilp.execute_vars();
  result.preserve_vars = ilp.preserve_vars();
  const solver::SolveResult solved =
      solver::make_backend(backend)->solve(ilp.model(), options.solve);
  result.solver_status = solved.status;
  result.solver_seconds = solved.seconds;
  if (!solved.has_solution()) {
    std::string why = "order ilp " + std::string(solver::to_string(solved.status));
    if (!solved.message.empty()) why += " (" + solved.message + ")";
    return keep_given(why);
  }
  const std::vector<int> order = ilp.decode(solved.values);
  const std::string problem = order_problem(graph, order);
  if (!problem.empty())
    return keep_given("order ilp solution is not an execution order: " + problem);
  const std::int64_t peak = resident_peak_bytes(graph, order);
  if (peak > result.given_peak_bytes)
    return keep_given("order ilp solution is worse than the given order");
  result.order = order;
  result.peak_bytes = peak;
  result.outcome = OrderOutcome::Reordered;
  result.note =
      "order ilp " + std::string(solver::to_string(solved.status)) + " (" + solved.backend;
  if (solved.status != solver::Status::Optimal)
    result.note += ", gap " + madpipe::format_percent(solved.gap);
  result.note += peak == result.lower_bound_bytes ? ", meets the lower bound)" : ")";
  return result;
}

// Nodes [begin, end) of `graph` as a graph of their own, whose orders have the resident peaks of
// the same orders inside the whole graph (when begin and end are sequential cuts). Tensors made
// before the part are its inputs; a tensor still needed after it is used by a last node,
// "(after)", that runs after every other.
static madpipe::arena::TensorGraph part_graph(const madpipe::arena::TensorGraph& graph, int begin,
                                              int end) {
  using namespace madpipe::arena;
  TensorGraph part;
  part.nodes.assign(graph.nodes.begin() + begin, graph.nodes.begin() + end);
  const int after = end - begin;
  bool outlived = false;
  std::vector<bool> has_successor(static_cast<std::size_t>(after), false);
  for (const Tensor& tensor : graph.tensors) {
    if (tensor.producer >= end) continue;
    Tensor local{
        tensor.name, tensor.size_bytes, tensor.producer < begin ? -1 : tensor.producer - begin, {}};
    bool used_later = false;
    for (int consumer : tensor.consumers) {
      if (consumer >= end) used_later = true;
      if (consumer < begin || consumer >= end) continue;
      local.consumers.push_back(consumer - begin);
      if (local.producer >= 0) has_successor[static_cast<std::size_t>(local.producer)] = true;
    }
    if (used_later) local.consumers.push_back(after);
    if (local.producer < 0 && local.consumers.empty()) continue;  // dead before the part
    outlived = outlived || used_later;
    part.tensors.push_back(std::move(local));
  }
  for (const OrderEdge& edge : graph.order_edges) {
    if (edge.before < begin || edge.after >= end) continue;
    part.order_edges.push_back({edge.before - begin, edge.after - begin});
    has_successor[static_cast<std::size_t>(edge.before - begin)] = true;
  }
  if (outlived) {
    part.nodes.push_back({"(after)", 0.0});
    for (int v = 0; v < after; ++v)
      if (!has_successor[static_cast<std::size_t>(v)]) part.order_edges.push_back({v, after});
  }
  madpipe::arena::check_tensor_graph(part);
  return part;
}

madpipe::arena::OperatorOrder madpipe::arena::ilp_operator_order(const TensorGraph& graph,
                                                                 const OrderIlpOptions& options) {
  check_tensor_graph(graph);
  std::vector<int> bounds = options.horizon == 0 ? sequential_cuts(graph) : std::vector<int>{};
  if (bounds.empty()) return order_whole_graph(graph, options);
  bounds.insert(bounds.begin(), 0);
  bounds.push_back(static_cast<int>(graph.nodes.size()));

  // Parts in sequence: each ordered on its own, within what is left of the time budget.
  OperatorOrder result;
  result.lower_bound_bytes = op_lower_bound_bytes(graph);
  std::vector<int> count(4, 0);  // per OrderOutcome
  int optimal = 0;
  std::string last_fallback;
  for (std::size_t p = 0; p + 1 < bounds.size(); ++p) {
    const int begin = bounds[p], end = bounds[p + 1];
    OrderIlpOptions part_options = options;
    part_options.solve.time_limit_s = options.solve.time_limit_s - result.solver_seconds;
    OperatorOrder part;
    part.order.resize(static_cast<std::size_t>(end - begin));
    std::iota(part.order.begin(), part.order.end(), 0);
    part.outcome = OrderOutcome::OnlyOrder;
    if (end - begin > 1 && part_options.solve.time_limit_s <= 0) {
      part.outcome = OrderOutcome::Kept;
      part.note = "time budget spent";
    } else if (end - begin > 1) {
      part = order_whole_graph(part_graph(graph, begin, end), part_options);
      result.execute_vars += part.execute_vars;
      result.preserve_vars += part.preserve_vars;
      result.coexisting_pairs += part.coexisting_pairs;
      result.solver_seconds += part.solver_seconds;
      if (part.outcome == OrderOutcome::Reordered) {
        if (part.solver_status == solver::Status::Optimal) ++optimal;
        if (result.solver_status != solver::Status::Feasible)
          result.solver_status = part.solver_status;
      }
    }
    ++count[static_cast<std::size_t>(part.outcome)];
    if (part.outcome == OrderOutcome::Kept) last_fallback = part.note;
    for (int v : part.order)
      if (v < end - begin) result.order.push_back(begin + v);  // drops "(after)"
  }
  for (OrderOutcome outcome : {OrderOutcome::OnlyOrder, OrderOutcome::AtLowerBound,
                               OrderOutcome::Kept, OrderOutcome::Reordered})
    if (count[static_cast<std::size_t>(outcome)] > 0) result.outcome = outcome;
  std::vector<int> given(graph.nodes.size());
  std::iota(given.begin(), given.end(), 0);
  result.given_peak_bytes = resident_peak_bytes(graph, given);
  auto counted = [&](OrderOutcome outcome) {
    return std::to_string(count[static_cast<std::size_t>(outcome)]);
  };
  result.note = std::to_string(bounds.size() - 1) +
                " parts in sequence: " + counted(OrderOutcome::Reordered) +
                " ordered by the ilp (" + std::to_string(optimal) + " optimal), " +
                counted(OrderOutcome::OnlyOrder) + " with one order, " +
                counted(OrderOutcome::AtLowerBound) + " at their lower bound, " +
                counted(OrderOutcome::Kept) + " kept" +
                (last_fallback.empty() ? "" : " (last: " + last_fallback + ")");
  const std::string problem = order_problem(graph, result.order);
  const std::int64_t peak = problem.empty() ? resident_peak_bytes(graph, result.order) : 0;
  if (!problem.empty() || peak > result.given_peak_bytes) {
    result.note +=
        "; the joined order is " +
        (problem.empty() ? std::string("worse than the given one") : "invalid: " + problem) +
        "; given order kept";
    result.order = given;
    result.outcome = OrderOutcome::Kept;
    result.peak_bytes = result.given_peak_bytes;
    return result;
  }
  result.peak_bytes = peak;
  return result;
}
