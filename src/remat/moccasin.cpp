#include "remat/moccasin.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "remat/moccasin_milp.hpp"
#include "remat/remat_heuristic.hpp"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <sstream>

const char* madpipe::remat::to_string(MoccasinVariant variant) {
  switch (variant) {
    case MoccasinVariant::Auto:
      return "auto";
    case MoccasinVariant::Staged:
      return "staged";
    case MoccasinVariant::OrderFree:
      return "order-free";
  }
  MADPIPE_UNREACHABLE("moccasin variant");
}

int madpipe::remat::staged_event(int rank, int stage) {
  assert(rank >= 1 && rank <= stage && "staged_event: rank out of 1..stage");
  return stage * (stage - 1) / 2 + rank;
}

int madpipe::remat::staged_event_count(int nodes) { return nodes * (nodes + 1) / 2; }

std::string madpipe::remat::infeasible_budget_reason(const RematGraph& graph,
                                                     std::int64_t budget_bytes) {
  for (int v = 0; v < graph.size(); ++v) {
    const RematNode& node = graph.nodes[static_cast<std::size_t>(v)];
    std::int64_t needed = node.size_bytes;
    for (int u : node.inputs) needed += graph.nodes[static_cast<std::size_t>(u)].size_bytes;
    if (needed <= budget_bytes) continue;
    const std::size_t inputs = node.inputs.size();
    std::string what = "its output";
    if (inputs > 0)
      what = (inputs == 1 ? "its input" : "its " + std::to_string(inputs) + " inputs") + " and " +
             what;
    return "node '" + node.name + "' (" + std::to_string(v) + ") needs " + what + ": " +
           std::to_string(needed) + " > " + std::to_string(budget_bytes);
  }
  return "";
}

madpipe::remat::MoccasinVariant madpipe::remat::resolved_variant(const RematGraph& graph,
                                                                 const MoccasinOptions& options) {
  if (options.variant != MoccasinVariant::Auto) return options.variant;
  return graph.size() <= options.order_free_max_nodes ? MoccasinVariant::OrderFree
                                                      : MoccasinVariant::Staged;
}

static void check_options(const madpipe::remat::MoccasinOptions& options,
                          std::int64_t budget_bytes) {
  using madpipe::throw_invalid;
  if (budget_bytes < 0)
    throw_invalid("", "budget_bytes", "must be >= 0, got " + std::to_string(budget_bytes));
  if (options.max_computations < 1)
    throw_invalid("", "max_computations",
                  "must be >= 1, got " + std::to_string(options.max_computations));
  if (!(options.solve.time_limit_s > 0)) throw_invalid("", "time_limit_s", "must be > 0 seconds");
}

// Computations at most in a sequence taking no more than `time_ms`: every node once plus the
// recomputations that time pays for; 0 (no bound) when a recomputable node takes no time.
static int max_computations_within(const madpipe::remat::RematGraph& graph, double time_ms) {
  double cheapest = madpipe::solver::kInf;
  for (const madpipe::remat::RematNode& node : graph.nodes)
    if (node.recomputable) cheapest = std::min(cheapest, node.duration_ms);
  if (!(cheapest > 0)) return 0;
  if (!std::isfinite(cheapest)) return graph.size();
  const double extra =
      std::floor((time_ms - madpipe::remat::base_duration_ms(graph)) / cheapest + 1e-9);
  return extra < 1e6 ? graph.size() + static_cast<int>(std::max(0.0, extra)) : 0;
}

static std::unique_ptr<madpipe::remat::RematMilp> make_milp(const madpipe::remat::RematGraph& graph,
                                                            std::int64_t budget_bytes,
                                                            int max_computations,
                                                            madpipe::remat::MoccasinVariant variant,
                                                            const std::vector<int>& hint) {
  using madpipe::remat::MoccasinVariant;
  if (variant == MoccasinVariant::OrderFree) {
    double hint_ms = 0;
    for (int v : hint) hint_ms += graph.nodes[static_cast<std::size_t>(v)].duration_ms;
    const int events = hint.empty() ? 0 : max_computations_within(graph, hint_ms);
    return madpipe::remat::make_order_free_milp(graph, budget_bytes, max_computations, events);
  }
  if (variant == MoccasinVariant::Staged)
    return madpipe::remat::make_staged_milp(graph, budget_bytes, max_computations);
  madpipe::throw_invalid("", "variant", "give staged or order-free, not auto");
}

madpipe::solver::Model madpipe::remat::moccasin_model(const RematGraph& graph,
                                                      std::int64_t budget_bytes,
                                                      const MoccasinOptions& options,
                                                      MoccasinVariant variant,
                                                      const std::vector<int>& hint) {
  check_remat_graph(graph);
  check_options(options, budget_bytes);
  const std::unique_ptr<RematMilp> milp =
      make_milp(graph, budget_bytes, options.max_computations, variant, hint);
  if (!hint.empty()) milp->set_start(hint);
  return milp->model();
}

namespace {
using madpipe::remat::GraphReplay;
using madpipe::remat::GraphSequence;
using madpipe::remat::MoccasinResult;
using madpipe::remat::RematGraph;

// A sequence replayed and checked against the budget and the caps.
struct CheckedPlan {
  GraphSequence sequence;
  GraphReplay replay;
  std::string problem;  // why it is rejected; empty when accepted
};

// One MILP solve and its decoded computations (empty without a solution).
struct MilpRun {
  madpipe::solver::SolveResult solved;
  std::vector<int> nodes;
  bool started_from_hint = false;
};
}  // namespace

static CheckedPlan check_plan(const RematGraph& graph, const std::vector<int>& nodes,
                              std::int64_t budget_bytes, int max_computations) {
  CheckedPlan plan;
  plan.sequence = madpipe::remat::with_earliest_frees(graph, nodes);
  plan.replay = madpipe::remat::simulate_remat(graph, plan.sequence);
  if (!plan.replay.valid) {
    plan.problem = plan.replay.problem;
  } else if (plan.replay.peak_bytes > budget_bytes) {
    plan.problem = "peak " + std::to_string(plan.replay.peak_bytes) + " > budget " +
                   std::to_string(budget_bytes) + " at step " +
                   std::to_string(plan.replay.peak_step + 1);
  } else {
    for (int v = 0; v < graph.size(); ++v) {
      const int cap = graph.nodes[static_cast<std::size_t>(v)].recomputable ? max_computations : 1;
      if (plan.replay.computations[static_cast<std::size_t>(v)] > cap) {
        plan.problem = "node '" + graph.nodes[static_cast<std::size_t>(v)].name + "' computed " +
                       std::to_string(plan.replay.computations[static_cast<std::size_t>(v)]) +
                       " times > " + std::to_string(cap);
        break;
      }
    }
  }
  return plan;
}

static MilpRun run_milp(const RematGraph& graph, std::int64_t budget_bytes,
                        const madpipe::remat::MoccasinOptions& options,
                        madpipe::remat::MoccasinVariant variant, const std::string& backend,
                        const std::vector<int>& hint) {
  MilpRun run;
  const std::unique_ptr<madpipe::remat::RematMilp> milp =
      make_milp(graph, budget_bytes, options.max_computations, variant, hint);
  run.started_from_hint = !hint.empty() && milp->set_start(hint);
  run.solved = madpipe::solver::make_backend(backend)->solve(milp->model(), options.solve);
  if (run.solved.has_solution()) run.nodes = milp->decode(run.solved.values);
  return run;
}

static void adopt(MoccasinResult& result, CheckedPlan plan, const std::string& method) {
  result.method = method;
  result.sequence = std::move(plan.sequence);
  result.computations = plan.replay.computations;
  result.total_ms = plan.replay.total_ms;
  result.peak_bytes = plan.replay.peak_bytes;
}

madpipe::remat::MoccasinResult madpipe::remat::moccasin_remat(const RematGraph& graph,
                                                              std::int64_t budget_bytes,
                                                              const MoccasinOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  check_remat_graph(graph);
  check_options(options, budget_bytes);
  MoccasinResult result;
  result.variant = resolved_variant(graph, options);
  result.budget_bytes = budget_bytes;
  result.base_ms = result.bound_ms = base_duration_ms(graph);
  result.no_remat_peak_bytes = no_remat_peak_bytes(graph);
  auto finish = [&](solver::Status status, std::string note) {
    result.status = status;
    result.note = std::move(note);
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
  };
  const int cap = options.max_computations;

  if (std::string reason = infeasible_budget_reason(graph, budget_bytes); !reason.empty())
    return finish(solver::Status::Infeasible, reason);
  if (result.no_remat_peak_bytes <= budget_bytes) {
    adopt(result, check_plan(graph, input_order(graph), budget_bytes, cap), "no remat");
    return finish(solver::Status::Optimal, "the input order fits without recomputation");
  }

  RematHint hint = best_remat_hint(graph, budget_bytes, cap);
  bool has_hint = !hint.sequence.empty();
  auto keep_hint = [&](const std::string& why) {
    if (!has_hint) return finish(solver::Status::Error, why + "; no heuristic sequence fits");
    adopt(result, check_plan(graph, computed_nodes(hint.sequence), budget_bytes, cap), hint.method);
    return finish(solver::Status::Feasible, why + "; " + hint.method + " sequence kept");
  };

  std::string backend = options.backend;
  if (backend.empty()) {
    const std::vector<std::string> built = solver::built_backends();
    if (built.empty()) return keep_hint("no MILP backend built");
    backend = built.front();
  }
  if (result.variant == MoccasinVariant::OrderFree) {
    // Phase 1: the staged model (fast) gives the order-free one a better start and fewer events.
    const MilpRun staged = run_milp(graph, budget_bytes, options, MoccasinVariant::Staged, backend,
                                    computed_nodes(hint.sequence));
    result.solver_seconds += staged.solved.seconds;
    if (staged.solved.has_solution()) {
      CheckedPlan plan = check_plan(graph, staged.nodes, budget_bytes, cap);
      if (plan.problem.empty() && (!has_hint || plan.replay.total_ms < hint.total_ms - 1e-9)) {
        hint = {std::move(plan.sequence), plan.replay.total_ms, plan.replay.peak_bytes,
                "milp (staged)"};
        has_hint = true;
      }
    }
  }
  const MilpRun run = run_milp(graph, budget_bytes, options, result.variant, backend,
                               computed_nodes(hint.sequence));
  const solver::SolveResult& solved = run.solved;
  result.solver_seconds += solved.seconds;
  if (std::isfinite(solved.bound)) result.bound_ms = std::max(result.bound_ms, solved.bound);
  std::string outcome = "milp " + std::string(solver::to_string(solved.status)) + " (" +
                        solved.backend + ", " + to_string(result.variant);
  if (solved.status == solver::Status::Feasible)
    outcome += ", gap " + madpipe::format_percent(solved.gap);
  if (has_hint && !run.started_from_hint) outcome += ", the hint did not fit the variant";
  outcome += ")";
  if (!solved.message.empty()) outcome += ": " + solved.message;

  if (solved.status == solver::Status::Infeasible) {
    if (has_hint) return keep_hint(outcome + " although a heuristic sequence fits");
    return finish(solver::Status::Infeasible, "no " + std::string(to_string(result.variant)) +
                                                  " sequence with at most " + std::to_string(cap) +
                                                  " computations per node fits: " + outcome);
  }
  if (!solved.has_solution()) {
    if (solved.status == solver::Status::Timeout && !has_hint)
      return finish(solver::Status::Timeout, outcome + "; no heuristic sequence fits");
    return keep_hint(outcome);
  }
  CheckedPlan plan = check_plan(graph, run.nodes, budget_bytes, cap);
  if (!plan.problem.empty())
    return keep_hint(outcome + ", its plan is rejected by the simulator: " + plan.problem);
  if (has_hint && plan.replay.total_ms > hint.total_ms + 1e-9)
    return keep_hint(outcome + ", its plan is slower than the hint");
  adopt(result, std::move(plan), "milp");
  if (solved.status == solver::Status::Optimal) result.bound_ms = result.total_ms;
  return finish(solved.status, outcome);
}
