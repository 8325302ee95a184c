#include "partition/planning_budget.hpp"

#include "core/units.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>

madpipe::partition::PlanningBudget::PlanningBudget(Settings settings)
    : settings_(std::move(settings)) {
  start_ = now();
  phase_start_ = start_;
}

double madpipe::partition::PlanningBudget::now() const {
  if (settings_.clock) return settings_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double madpipe::partition::PlanningBudget::elapsed_s() const { return now() - start_; }

double madpipe::partition::PlanningBudget::seconds_left() const {
  if (!has_limit()) return std::numeric_limits<double>::infinity();
  return settings_.time_limit_s - elapsed_s();
}

void madpipe::partition::PlanningBudget::enter(const std::string& phase) {
  const double t = now();
  if (!phase_.empty()) {
    auto it = std::find_if(phases_.begin(), phases_.end(),
                           [&](const PhaseTime& p) { return p.phase == phase_; });
    if (it == phases_.end()) it = phases_.insert(phases_.end(), PhaseTime{phase_, 0});
    it->seconds += t - phase_start_;
  }
  phase_ = phase;
  step_.clear();
  phase_start_ = t;
  maybe_report(true);
}

void madpipe::partition::PlanningBudget::step(const std::string& what) {
  step_ = what;
  maybe_report(false);
}

void madpipe::partition::PlanningBudget::improved(double period_ms) {
  best_ms_ = std::min(best_ms_, period_ms);
}

void madpipe::partition::PlanningBudget::detail(const std::string& line) {
  if (settings_.detailed && settings_.progress) settings_.progress(line);
  maybe_report(false);
}

void madpipe::partition::PlanningBudget::cut(const std::string& what) {
  if (std::find(cuts_.begin(), cuts_.end(), what) == cuts_.end()) cuts_.push_back(what);
}

std::vector<madpipe::partition::PhaseTime> madpipe::partition::PlanningBudget::phases() const {
  std::vector<PhaseTime> out = phases_;
  if (!phase_.empty()) {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const PhaseTime& p) { return p.phase == phase_; });
    if (it == out.end()) it = out.insert(out.end(), PhaseTime{phase_, 0});
    it->seconds += now() - phase_start_;
  }
  return out;
}

void madpipe::partition::PlanningBudget::maybe_report(bool phase_started) {
  if (!settings_.progress || settings_.detailed) return;
  const double elapsed = elapsed_s();
  if (elapsed < settings_.quiet_s) return;
  if (!phase_started && last_report_ >= 0 && elapsed - last_report_ < settings_.interval_s) return;
  last_report_ = elapsed;
  std::ostringstream line;
  line << std::fixed << std::setprecision(1) << elapsed << " s: " << phase_;
  if (!step_.empty()) line << " (" << step_ << ")";
  line << ", best "
       << (std::isfinite(best_ms_) ? format_ms(best_ms_) + " per micro-batch"
                                   : std::string("none yet"));
  if (has_limit()) line << ", " << std::max(0.0, seconds_left()) << " s left";
  settings_.progress(line.str());
}
