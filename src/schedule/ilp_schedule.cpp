#include "schedule/ilp_schedule.hpp"

#include "schedule/memory.hpp"
#include "schedule/pattern_ilp.hpp"
#include "schedule/search.hpp"
#include "solver/mps.hpp"

#include <algorithm>
#include <cmath>

namespace madpipe::schedule {

double sequential_period_ms(const std::vector<Stage>& stages, const Platform& platform) {
  double total = 0;
  for (const Op& op : micro_batch_chain(stages, platform)) total += op.duration_ms;
  for (const Op& op : weight_ops(stages)) total += op.duration_ms;
  return total;
}

void tighten_bound(solver::SolveResult& result, double known_lower_bound) {
  if (!(known_lower_bound > result.bound)) return;
  result.bound = std::isfinite(result.objective) ? std::min(known_lower_bound, result.objective)
                                                 : known_lower_bound;
  result.gap = solver::relative_gap(result.objective, result.bound);
}

SolvedPatternIlp solve_pattern_ilp(const PatternIlp& ilp, const std::string& backend,
                                   const solver::SolveOptions& options, const std::string& mps_path,
                                   double known_lower_bound) {
  auto solver = solver::make_backend(backend);
  if (!mps_path.empty()) solver::write_mps(ilp.model(), mps_path);
  SolvedPatternIlp out;
  out.solve = solver->solve(ilp.model(), options);
  if (out.solve.has_solution()) {
    PatternIlp::Decoded decoded = ilp.decode(out.solve.values);
    if (fits_memory(decoded.stages, decoded.pattern, ilp.platform()))
      out.decoded = std::move(decoded);
  }
  out.solve.values.clear();
  tighten_bound(out.solve, known_lower_bound);
  return out;
}

IlpScheduleResult ilp_schedule(const std::vector<Stage>& stages, const Platform& platform,
                               const IlpScheduleOptions& options) {
  IlpScheduleResult result;
  PatternIlp::Spec spec;
  spec.blocks = stages;
  spec.fixed_allocation = true;
  spec.period_upper_bound_ms =
      std::min(options.period_upper_bound_ms * (1 + 1e-6), sequential_period_ms(stages, platform));
  if (options.warm_start && options.warm_start->k == 1)
    // A hair above the start's period: the solver must be able to take the start as it is.
    spec.period_upper_bound_ms =
        std::min(spec.period_upper_bound_ms, options.warm_start->period_ms * (1 + 1e-6));
  spec.period_upper_bound_ms = std::max(spec.period_upper_bound_ms, 1e-9);
  PatternIlp ilp(spec, platform);
  if (options.warm_start) result.warm_started = ilp.set_start(stages, *options.warm_start);
  SolvedPatternIlp solved = solve_pattern_ilp(ilp, options.backend, options.solve, options.mps_path,
                                              options.period_lower_bound_ms);
  result.solve = std::move(solved.solve);
  if (solved.decoded) result.pattern = std::move(solved.decoded->pattern);
  return result;
}

}  // namespace madpipe::schedule
