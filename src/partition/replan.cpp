#include "partition/replan.hpp"

#include "core/error.hpp"
#include "core/units.hpp"
#include "schedule/search.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace {
double ratio(double measured, int count, double planned) {
  return count > 0 && measured > 0 && planned > 0 ? measured / planned : 1.0;
}

void check_sizes(const madpipe::plan::Plan& plan,
                 const std::vector<madpipe::partition::MeasuredStage>& measured) {
  if (measured.size() != plan.stages.size())
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "measurements",
                         std::to_string(measured.size()) + " stages measured but the plan has " +
                             std::to_string(plan.stages.size()));
}
}  // namespace

std::vector<madpipe::partition::StageRatio> madpipe::partition::stage_ratios(
    const plan::Plan& plan, const std::vector<MeasuredStage>& measured) {
  check_sizes(plan, measured);
  std::vector<StageRatio> ratios;
  for (std::size_t s = 0; s < plan.stages.size(); ++s)
    ratios.push_back(
        {ratio(measured[s].forward_ms, measured[s].forwards, plan.stages[s].forward_ms),
         ratio(measured[s].backward_ms, measured[s].backwards, plan.stages[s].backward_ms)});
  return ratios;
}

madpipe::Profile madpipe::partition::corrected_profile(const Profile& profile,
                                                       const plan::Plan& plan,
                                                       const std::vector<MeasuredStage>& measured) {
  if (plan.stages.empty() ||
      plan.stages.back().last_layer + 1 != static_cast<int>(profile.layers.size()))
    throw Error(ErrorKind::InvalidInput, "", "/stages",
                "the plan does not cover the profile's " + std::to_string(profile.layers.size()) +
                    " layers");
  const std::vector<StageRatio> ratios = stage_ratios(plan, measured);
  Profile corrected = profile;
  for (std::size_t s = 0; s < plan.stages.size(); ++s)
    for (int l = plan.stages[s].first_layer; l <= plan.stages[s].last_layer; ++l) {
      corrected.layers[l].forward_ms *= ratios[s].forward;
      set_backward_ms(corrected.layers[l], corrected.layers[l].backward_ms * ratios[s].backward);
    }
  return corrected;
}

madpipe::partition::ReplanOutcome madpipe::partition::replan_from_measurements(
    const Profile& profile, const plan::Plan& current, const std::vector<MeasuredStage>& measured,
    const PlannerOptions& options, double min_gain) {
  ReplanOutcome outcome;
  outcome.plan = current;
  // The running allocation as it really runs: its stages (with their sequences) at measured times.
  std::vector<schedule::Stage> stages = current.stages;
  const std::vector<StageRatio> ratios = stage_ratios(current, measured);
  for (std::size_t s = 0; s < stages.size(); ++s) {
    stages[s].forward_ms *= ratios[s].forward;
    stages[s].backward_ms *= ratios[s].backward;
    stages[s].backward_weight_ms *= ratios[s].backward;
  }
  // Compared with the new plan's predicted period: a tied weight's exchange counted in both.
  if (auto pattern = schedule::schedule_under_memory(stages, current.platform))
    outcome.current_period_ms = plan::period_with_tied_exchange_ms(
        pattern->pattern, stages, current.platform, options.micro_batches_per_step);

  const PlanResult result =
      make_plan(corrected_profile(profile, current, measured), current.platform, options);
  if (result.feasible) outcome.new_period_ms = result.plan.predicted.period_ms;
  const bool better =
      result.feasible && (std::isinf(outcome.current_period_ms) ||
                          outcome.new_period_ms < outcome.current_period_ms * (1.0 - min_gain));
  std::ostringstream reason;
  reason << "on the measured costs the running plan takes "
         << (std::isinf(outcome.current_period_ms) ? std::string("(no pattern fits)")
                                                   : format_ms(outcome.current_period_ms))
         << " per micro-batch, a new " << to_string(options.algorithm) << " plan "
         << (result.feasible ? format_ms(outcome.new_period_ms) : std::string("(none fits)"));
  if (better) {
    outcome.switch_plan = true;
    outcome.plan = result.plan;
    reason << ": switching to the new plan";
  } else {
    char gain[32];
    std::snprintf(gain, sizeof gain, "%.0f%%", min_gain * 100);
    reason << ": keeping the running plan (a switch needs a gain of " << gain << ")";
  }
  outcome.reason = reason.str();
  return outcome;
}

std::string madpipe::partition::format_measurements(const plan::Plan& plan,
                                                    const std::vector<MeasuredStage>& measured) {
  const std::vector<StageRatio> ratios = stage_ratios(plan, measured);
  std::ostringstream out;
  out << "stage  layers   rank  forward planned/measured (ms)  backward planned/measured (ms)\n";
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const schedule::Stage& st = plan.stages[s];
    char line[200];
    std::snprintf(line, sizeof line,
                  "%5zu  %3d..%-3d %4d  %9.3f %9.3f  x%-7.2f     %9.3f %9.3f  x%.2f\n", s,
                  st.first_layer, st.last_layer, st.gpu, st.forward_ms, measured[s].forward_ms,
                  ratios[s].forward, st.backward_ms, measured[s].backward_ms, ratios[s].backward);
    out << line;
  }
  return out.str();
}
