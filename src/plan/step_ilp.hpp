#pragma once

// The finite-horizon ILP of one synchronous step: every op of m micro-batches on the plan's
// stages (F, B, W and transfers), their start times and their order on each GPU and link, the
// step's end minimized, within a memory budget per GPU. Its solution is a step order
// (Plan::step_order); its bound proves how short a step of these stages can be.

#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "solver/solve.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::plan {

struct StepIlpOptions {
  std::string backend;  // solver::make_backend's name
  solver::SolveOptions solve;
  // Per GPU: what it may hold at the start of each F (static memory, what its stages store from
  // F to B and keep from B to W), as simulate() counts it.
  std::vector<std::int64_t> memory_budget_bytes;
};

struct StepIlpResult {
  solver::Status status = solver::Status::Error;
  std::optional<schedule::StepOrder> order;  // each GPU's F, B and W by the solution's starts
  double step_ms = 0;                        // the solution's step
  double bound_ms = 0;  // no step in which each stage runs its micro-batches in order is shorter
  double seconds = 0;
  std::string message;  // the solver's, where it failed
};

// How many ordering variables the ILP of a step of `micro_batches` has: pairs of ops on one GPU
// or link that no dependency orders (each stage runs its F, B, W and transfers in micro-batch
// order); INT_MAX for a step of more than 5000 ops, which the ILP does not model.
int step_ilp_binaries(const Plan& plan, int micro_batches);

// Solves the step ILP. Each stage runs its ops of each kind in micro-batch order; memory is
// checked at the start of every F (where it grows; a B whose W keeps more than the B frees is not
// checked). `start` (a step of the same plan, e.g. simulate_step()) is the horizon and the
// solver's first incumbent where it satisfies the ILP. Throws Error{InvalidInput} for
// micro_batches < 1 or a budget without one entry per GPU.
StepIlpResult solve_step_ilp(const Plan& plan, int micro_batches, const StepIlpOptions& options,
                             const SimResult& start);

}  // namespace madpipe::plan
