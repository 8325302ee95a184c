#pragma once

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace madpipe::partition {

// Wall time one phase of a planning request took (PlanResult::phases, bench/planner_bench).
struct PhaseTime {
  std::string phase;
  double seconds = 0;
};

// The time of one planning request: the deadline every phase checks, where the time went, and
// the progress a user sees on long requests. A status line (phase, best period so far, time
// left) goes to `progress` once the request has run `quiet_s`, then at most every `interval_s`
// and whenever a phase starts. With `detailed`, every detail() line goes out as well, at once.
class PlanningBudget {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic

  struct Settings {
    double time_limit_s = std::numeric_limits<double>::infinity();
    std::function<void(const std::string&)> progress;
    bool detailed = false;
    double quiet_s = 1.0;
    double interval_s = 1.0;
    Clock clock;  // empty: std::chrono::steady_clock
  };

  explicit PlanningBudget(Settings settings);

  // Starts `phase`; the time since the previous one started is charged to the previous one.
  // Phases of the same name add up.
  void enter(const std::string& phase);
  // A finer step of the current phase ("7/12 allocations"): shown in the status line.
  void step(const std::string& what);
  // The best normalized period found so far, in ms.
  void improved(double period_ms);
  // A line for --verbose progress only.
  void detail(const std::string& line);

  double elapsed_s() const;
  double seconds_left() const;  // may be negative; infinite without a limit
  bool expired() const { return seconds_left() <= 0; }
  // Whether the request has used `share` (0..1] of its time limit: later phases keep the rest.
  bool used(double share) const {
    return has_limit() && elapsed_s() >= share * settings_.time_limit_s;
  }
  bool has_limit() const {
    return settings_.time_limit_s < std::numeric_limits<double>::infinity();
  }

  // Records that the deadline cut `what` short (once per text): PlanResult::notes.
  void cut(const std::string& what);
  const std::vector<std::string>& cuts() const { return cuts_; }

  // Phase times so far, the current phase included up to now, in order of first entry.
  std::vector<PhaseTime> phases() const;

 private:
  double now() const;
  void maybe_report(bool phase_started);

  Settings settings_;
  double start_ = 0;
  double phase_start_ = 0;
  double last_report_ = -1;
  std::string phase_;
  std::string step_;
  double best_ms_ = std::numeric_limits<double>::infinity();
  std::vector<PhaseTime> phases_;
  std::vector<std::string> cuts_;
};

}  // namespace madpipe::partition
