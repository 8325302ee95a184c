#include "plan/step_ilp.hpp"

#include "core/error.hpp"
#include "plan/step.hpp"
#include "schedule/memory.hpp"
#include "solver/linear_expr.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

namespace madpipe::plan {

namespace {

using schedule::OpKind;

// The ops of a step: op id = micro_batch * length + position, position in one micro-batch's
// chain (F, transfers, B) followed by the W ops of split stages.
struct StepOps {
  int micro_batches = 0;
  int length = 0;
  std::vector<schedule::Op> ops;        // per position
  std::vector<int> before;              // per position: the one it follows in its micro-batch (-1)
  std::vector<int> resource;            // per position: its GPU, or its link (resource_of)
  std::vector<std::vector<int>> after;  // per position: those that follow it

  int count() const { return micro_batches * length; }  // callers keep it within kMaxStepIlpOps
  int position(int id) const { return id % length; }
  int micro_batch(int id) const { return id / length; }
};

StepOps step_ops(const Plan& plan, int micro_batches) {
  StepOps s;
  s.micro_batches = micro_batches;
  s.ops = schedule::micro_batch_chain(plan.stages, plan.platform);
  const int chain = static_cast<int>(s.ops.size());
  for (int c = 0; c < chain; ++c) s.before.push_back(c - 1);
  for (const schedule::Op& w : schedule::weight_ops(plan.stages)) {
    for (int c = 0; c < chain; ++c)
      if (s.ops[c].kind == OpKind::B && s.ops[c].stage == w.stage) s.before.push_back(c);
    s.ops.push_back(w);
  }
  s.length = static_cast<int>(s.ops.size());
  s.after.resize(s.length);
  for (int c = 0; c < s.length; ++c) {
    s.resource.push_back(schedule::resource_of(s.ops[c], plan.platform.gpus));
    if (s.before[c] >= 0) s.after[s.before[c]].push_back(c);
  }
  return s;
}

// The step's ops in an order that respects every dependency: micro-batch + position rises along
// every edge (an op's successors in its micro-batch come later in it, W after the chain, and the
// same op of the next micro-batch is one micro-batch later).
std::vector<int> topological_order(const StepOps& s) {
  std::vector<int> order(s.count());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return s.micro_batch(a) + s.position(a) < s.micro_batch(b) + s.position(b);
  });
  return order;
}

// Which ops come after which, by the dependencies of a micro-batch and each stage running its
// ops of a kind in micro-batch order: reach[a] holds b when b cannot start before a ends.
class Reach {
 public:
  explicit Reach(const StepOps& s) : n_(s.count()), words_((n_ + 63) / 64), bits_(n_ * words_) {
    const std::vector<int> order = topological_order(s);
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int a = *it;
      const auto add = [&](int b) {
        set(a, b);
        for (int w = 0; w < words_; ++w) bits_[a * words_ + w] |= bits_[b * words_ + w];
      };
      for (int c : s.after[s.position(a)]) add(s.micro_batch(a) * s.length + c);
      if (s.micro_batch(a) + 1 < s.micro_batches) add(a + s.length);
    }
  }
  bool before(int a, int b) const { return (bits_[a * words_ + b / 64] >> (b % 64)) & 1U; }

 private:
  void set(int a, int b) { bits_[a * words_ + b / 64] |= std::uint64_t{1} << (b % 64); }
  int n_, words_;
  std::vector<std::uint64_t> bits_;
};

// The pairs of ops on one resource that nothing orders, per resource.
std::map<int, std::vector<std::pair<int, int>>> open_pairs(const StepOps& s, const Reach& reach) {
  std::map<int, std::vector<int>> on;
  for (int id = 0; id < s.count(); ++id) on[s.resource[s.position(id)]].push_back(id);
  std::map<int, std::vector<std::pair<int, int>>> pairs;
  for (const auto& [resource, ids] : on)
    for (std::size_t x = 0; x < ids.size(); ++x)
      for (std::size_t y = x + 1; y < ids.size(); ++y)
        if (!reach.before(ids[x], ids[y]) && !reach.before(ids[y], ids[x]))
          pairs[resource].emplace_back(ids[x], ids[y]);
  return pairs;
}

// Steps with more ops are not modelled (step_ilp_binaries).
constexpr std::int64_t kMaxStepIlpOps = 5000;

std::int64_t kept_until_weight(const schedule::Stage& stage) {
  return stage.splits_backward() ? stage.weight_kept_bytes : 0;
}

}  // namespace

int step_ilp_binaries(const Plan& plan, int micro_batches) {
  if (micro_batches < 1) return 0;
  const StepOps s = step_ops(plan, micro_batches);
  if (static_cast<std::int64_t>(s.length) * micro_batches > kMaxStepIlpOps)
    return std::numeric_limits<int>::max();
  const Reach reach(s);
  int binaries = 0;
  for (const auto& [resource, pairs] : open_pairs(s, reach))
    binaries += static_cast<int>(pairs.size());
  return binaries;
}

StepIlpResult solve_step_ilp(const Plan& plan, int micro_batches, const StepIlpOptions& options,
                             const SimResult& start) {
  const int gpus = plan.platform.gpus;
  if (micro_batches < 1)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "a step needs at least one micro-batch, got " + std::to_string(micro_batches));
  if (static_cast<int>(options.memory_budget_bytes.size()) != gpus)
    throw Error(ErrorKind::InvalidInput, "", "memory budget",
                "one entry per gpu (" + std::to_string(gpus) + "), got " +
                    std::to_string(options.memory_budget_bytes.size()));
  const StepOps s = step_ops(plan, micro_batches);
  if (s.count() > kMaxStepIlpOps)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "the step ILP models steps of at most " + std::to_string(kMaxStepIlpOps) +
                    " ops, this one has " + std::to_string(s.count()));
  const Reach reach(s);
  const double horizon = start.step_ms * (1 + 1e-9) + 1e-9;
  const auto duration = [&](int id) { return s.ops[s.position(id)].duration_ms; };
  // The ops each op follows and precedes: its micro-batch's dependencies, and the op of the
  // same kind and stage for the micro-batch before and after.
  const auto successors = [&](int id) {
    std::vector<int> next;
    for (int d : s.after[s.position(id)]) next.push_back(s.micro_batch(id) * s.length + d);
    if (s.micro_batch(id) + 1 < micro_batches) next.push_back(id + s.length);
    return next;
  };
  // Earliest start (head) and the longest way from an op's start to the step's end (tail).
  const std::vector<int> topological = topological_order(s);
  std::vector<double> head(s.count(), 0.0), tail(s.count(), 0.0);
  for (int id : topological)
    for (int b : successors(id)) head[b] = std::max(head[b], head[id] + duration(id));
  double longest = 0;
  for (auto it = topological.rbegin(); it != topological.rend(); ++it) {
    tail[*it] = duration(*it);
    for (int b : successors(*it)) tail[*it] = std::max(tail[*it], duration(*it) + tail[b]);
    longest = std::max(longest, head[*it] + tail[*it]);
  }
  const auto latest = [&](int id) { return std::max(head[id], horizon - tail[id]); };
  solver::Model model;
  std::vector<solver::Var> begin(s.count());
  for (int id = 0; id < s.count(); ++id)
    begin[id] = model.add_var(head[id], latest(id), false, "s_" + std::to_string(id));
  // No step ends sooner than its lower bound (less the tied exchange, which is not modelled).
  const double bound =
      std::max(longest, step_lower_bound_ms(plan, micro_batches) - plan.predicted.tied_exchange_ms);
  const solver::Var end = model.add_var(std::min(bound, horizon), horizon, false, "end");
  model.set_objective(end, 1);
  for (int id = 0; id < s.count(); ++id) {
    const std::vector<int> next = successors(id);
    for (int b : next)
      solver::add_constraint(model, solver::LinearExpr(begin[b]) - begin[id], duration(id),
                             solver::kInf, "dep_" + std::to_string(id) + "_" + std::to_string(b));
    if (next.empty())
      solver::add_constraint(model, solver::LinearExpr(end) - begin[id], duration(id), solver::kInf,
                             "end_" + std::to_string(id));
  }
  // The order of each pair of ops on one resource that no dependency orders: an ordering
  // variable (1 where the pair's first op runs first), or a constant where the horizon leaves
  // one order only. Big-M terms as small as the ops' windows allow.
  std::unordered_map<std::int64_t, solver::LinearExpr> first_before;
  const auto key = [&](int a, int b) { return static_cast<std::int64_t>(a) * s.count() + b; };
  const auto name = [](const char* what, int a, int b) {
    return std::string(what) + "_" + std::to_string(a) + "_" + std::to_string(b);
  };
  for (const auto& [resource, pairs] : open_pairs(s, reach))
    for (const auto& [a, b] : pairs) {
      const bool a_first = head[a] + duration(a) <= latest(b) + 1e-9;
      const bool b_first = head[b] + duration(b) <= latest(a) + 1e-9;
      if (a_first != b_first) {
        const int x = a_first ? a : b, y = a_first ? b : a;
        solver::add_constraint(model, solver::LinearExpr(begin[y]) - begin[x], duration(x),
                               solver::kInf, name("forced", x, y));
        first_before[key(a, b)] = a_first ? 1.0 : 0.0;
        continue;
      }
      const solver::Var y = model.add_var(0, 1, true, name("y", a, b));
      first_before[key(a, b)] = y;
      const double a_then_b = latest(a) + duration(a) - head[b];
      const double b_then_a = latest(b) + duration(b) - head[a];
      solver::add_constraint(
          model, solver::LinearExpr(begin[b]) - begin[a] - a_then_b * solver::LinearExpr(y),
          duration(a) - a_then_b, solver::kInf, name("order", a, b));
      solver::add_constraint(
          model, solver::LinearExpr(begin[a]) - begin[b] + b_then_a * solver::LinearExpr(y),
          duration(b), solver::kInf, name("order", b, a));
    }
  // 1 where op x ends before op f starts on their GPU.
  const auto runs_before = [&](int x, int f) -> solver::LinearExpr {
    if (reach.before(x, f)) return 1.0;
    if (reach.before(f, x)) return 0.0;
    if (x < f) return first_before.at(key(x, f));
    return 1.0 - first_before.at(key(f, x));
  };
  // Memory at the start of each F: what the GPU's other ops hold then.
  std::vector<std::vector<int>> on_gpu(gpus);
  for (int id = 0; id < s.count(); ++id)
    if (s.resource[s.position(id)] < gpus) on_gpu[s.resource[s.position(id)]].push_back(id);
  for (int g = 0; g < gpus; ++g) {
    const double fixed =
        static_cast<double>(schedule::static_memory(plan.stages, g, plan.platform).total());
    for (int f : on_gpu[g]) {
      const schedule::Op& op = s.ops[s.position(f)];
      if (op.kind != OpKind::F) continue;
      solver::LinearExpr held = fixed + static_cast<double>(plan.stages[op.stage].stored_bytes);
      double most = held.constant();  // what the GPU holds at most then, whatever the order
      for (int x : on_gpu[g]) {
        if (x == f) continue;
        const schedule::Stage& stage = plan.stages[s.ops[s.position(x)].stage];
        const double stored = static_cast<double>(stage.stored_bytes);
        const double kept = static_cast<double>(kept_until_weight(stage));
        const OpKind kind = s.ops[s.position(x)].kind;
        const double weight = kind == OpKind::F   ? stored
                              : kind == OpKind::B ? kept - stored
                                                  : -kept;
        if (weight != 0) held += weight * runs_before(x, f);
        most += std::max(0.0, weight);
      }
      if (most <= static_cast<double>(options.memory_budget_bytes[g])) continue;
      solver::add_constraint(model, held, -solver::kInf,
                             static_cast<double>(options.memory_budget_bytes[g]),
                             "memory_" + std::to_string(f));
    }
  }
  // The start step as the first incumbent.
  std::map<std::tuple<int, int, int>, double> started;  // (kind, stage, micro-batch) -> start
  for (const SimOp& op : start.ops)
    started[{static_cast<int>(op.kind), op.stage, op.micro_batch}] = op.start_ms;
  std::vector<double> hint(s.count(), -1);
  for (int id = 0; id < s.count(); ++id) {
    const schedule::Op& op = s.ops[s.position(id)];
    const auto it = started.find({static_cast<int>(op.kind), op.stage, s.micro_batch(id)});
    if (it == started.end()) continue;
    hint[id] = it->second;
    model.set_hint(begin[id], it->second);
  }
  model.set_hint(end, start.step_ms);
  for (const auto& [pair_key, y] : first_before) {
    if (y.terms().size() != 1) continue;  // a constant
    const int a = static_cast<int>(pair_key / s.count()),
              b = static_cast<int>(pair_key % s.count());
    model.set_hint(solver::Var{y.terms().front().var},
                   hint[a] < hint[b] || (hint[a] == hint[b] && a < b) ? 1 : 0);
  }

  StepIlpResult result;
  const solver::SolveResult solved =
      solver::make_backend(options.backend)->solve(model, options.solve);
  result.status = solved.status;
  result.seconds = solved.seconds;
  result.message = solved.message;
  result.bound_ms = std::isfinite(solved.bound) ? solved.bound : 0;
  if (!solved.has_solution()) return result;
  result.step_ms = solved.value(end);
  // Each GPU's and each link's ops by start; ops starting together (one lasts 0 ms) in
  // dependency order.
  const auto in_start_order = [&](std::vector<int> ids) {
    std::sort(ids.begin(), ids.end(), [&](int a, int b) {
      return std::make_tuple(solved.value(begin[a]), s.micro_batch(a) + s.position(a), a) <
             std::make_tuple(solved.value(begin[b]), s.micro_batch(b) + s.position(b), b);
    });
    std::vector<schedule::StepAction> actions;
    for (int id : ids)
      actions.push_back(
          {s.ops[s.position(id)].kind, s.ops[s.position(id)].stage, s.micro_batch(id)});
    return actions;
  };
  schedule::StepOrder order;
  order.micro_batches = micro_batches;
  for (int g = 0; g < gpus; ++g) order.per_gpu.push_back(in_start_order(on_gpu[g]));
  std::map<int, std::vector<int>> on_link;
  for (int id = 0; id < s.count(); ++id)
    if (s.resource[s.position(id)] >= gpus) on_link[s.resource[s.position(id)]].push_back(id);
  for (const auto& [resource, ids] : on_link) {
    const schedule::Op& op = s.ops[s.position(ids.front())];
    order.per_link.push_back({op.link, in_start_order(ids)});
  }
  result.order = std::move(order);
  return result;
}

}  // namespace madpipe::plan
