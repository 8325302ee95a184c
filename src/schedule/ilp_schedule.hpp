#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/stage.hpp"
#include "solver/solve.hpp"

#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace madpipe::schedule {

struct IlpScheduleOptions {
  std::string backend = "cbc";
  solver::SolveOptions solve{};
  // A 1-periodic pattern of the same stages: the MIP start, and the period to beat.
  std::optional<Pattern> warm_start;
  // The ILP only looks for patterns at least this fast; +inf: the slowest sensible one (all ops
  // of a micro-batch back to back).
  double period_upper_bound_ms = std::numeric_limits<double>::infinity();
  double period_lower_bound_ms = 0;  // a proven bound, reported in the result's bound
  std::string mps_path;              // also write the model there (MPS) before solving
};

struct IlpScheduleResult {
  std::optional<Pattern> pattern;  // 1-periodic, fits memory; absent when the solver found none
  solver::SolveResult solve;       // status, objective, bound, gap, seconds (values dropped)
  bool warm_started = false;       // the MIP start was accepted by the encoder
};

// Schedules a fixed partition with the ILP of thesis ch. 6 on the stage chain (ch. 7.2): each
// stage is a block with its own cost, stored activations and output. Throws Error(Unsupported)
// when `options.backend` is not built.
IlpScheduleResult ilp_schedule(const std::vector<Stage>& stages, const Platform& platform,
                               const IlpScheduleOptions& options);

// What solving a PatternIlp gave: the decoded pattern when the solver found one that fits memory
// (it always should; checked all the same), and the solver's result without its values.
struct SolvedPatternIlp {
  std::optional<PatternIlp::Decoded> decoded;
  solver::SolveResult solve;
};

// Solves `ilp` with the named backend (writing it to `mps_path` first when that is not empty),
// decodes the incumbent, and raises the bound to `known_lower_bound`. Throws Error(Unsupported)
// when the backend is not built.
SolvedPatternIlp solve_pattern_ilp(const PatternIlp& ilp, const std::string& backend,
                                   const solver::SolveOptions& options, const std::string& mps_path,
                                   double known_lower_bound);

// Raises a result's bound to a bound known from elsewhere (the gap follows). The bound is kept
// out of the program itself: as a bound on T it slows CBC down by orders of magnitude on some
// instances.
void tighten_bound(solver::SolveResult& result, double known_lower_bound);

// Upper bound on the period of the best 1-periodic pattern of a chain: every op of one
// micro-batch one after the other (W ops included).
double sequential_period_ms(const std::vector<Stage>& stages, const Platform& platform);

}  // namespace madpipe::schedule
