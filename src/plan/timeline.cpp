#include "plan/timeline.hpp"

#include "core/units.hpp"
#include "plan/simulate.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

// ---------------------------------------------------------------------------------------------
// Building

static std::vector<std::string> gpu_rows(int gpus) {
  std::vector<std::string> rows;
  for (int g = 0; g < gpus; ++g) rows.push_back("GPU " + std::to_string(g));
  return rows;
}

static void sort_bars(mplan::Timeline& timeline) {
  std::stable_sort(timeline.bars.begin(), timeline.bars.end(),
                   [](const mplan::TimelineBar& a, const mplan::TimelineBar& b) {
                     return std::tie(a.start_ms, a.row) < std::tie(b.start_ms, b.row);
                   });
}

// Enough micro-batches for the steady state to show between the fill and the drain.
static int default_micro_batches(const mplan::Plan& plan) {
  const int k = std::max(plan.pattern.k, 1);
  const int num_stages = static_cast<int>(plan.stages.size());
  // simulate() reports a malformed pattern; only count what is in flight in a well-formed one.
  const bool well_formed =
      plan.pattern.k >= 1 &&
      std::all_of(plan.pattern.ops.begin(), plan.pattern.ops.end(), [num_stages](const ms::Op& op) {
        return op.stage >= 0 && op.stage < num_stages;
      });
  const std::vector<int> nca =
      well_formed ? ms::concurrent_activations(plan.pattern, num_stages) : std::vector<int>{};
  const int in_flight = nca.empty() ? 1 : *std::max_element(nca.begin(), nca.end());
  const int n = 2 * std::max(num_stages, in_flight);
  return std::max((n + k - 1) / k * k, 2 * k);
}

// Period j of the pattern begins at j * period_ms in pattern time. The simulator shifts pattern
// time so that the step starts at 0; F of stage 0 for micro-batch 0 (period j0, start s0 in the
// period) pins the shift: pattern time j0 * T + s0 is simulated time t0.
static std::vector<mplan::TimelineMarker> period_markers(const mplan::Plan& plan,
                                                         const mplan::SimResult& sim) {
  const double period = plan.pattern.period_ms;
  const int k = plan.pattern.k;
  const ms::Op* first_forward = nullptr;
  for (const ms::Op& op : plan.pattern.ops) {
    if (op.kind == ms::OpKind::F && op.stage == 0 && ((op.shift % k) + k) % k == 0)
      first_forward = &op;
  }
  const auto started = std::find_if(sim.ops.begin(), sim.ops.end(), [](const mplan::SimOp& op) {
    return op.kind == ms::OpKind::F && op.stage == 0 && op.micro_batch == 0;
  });
  std::vector<mplan::TimelineMarker> markers;
  if (first_forward == nullptr || started == sim.ops.end() || !(period > 0)) return markers;
  const double offset = started->start_ms - first_forward->start_ms;  // a period boundary
  const double tolerance = 1e-9 * period;
  const double first = std::ceil((-offset - tolerance) / period);
  for (double j = first; offset + j * period <= sim.step_ms + tolerance; j += 1) {
    const double time = std::max(0.0, offset + j * period);
    markers.push_back({time, "period " + std::to_string(markers.size() + 1)});
  }
  return markers;
}

mplan::Timeline mplan::timeline_of_plan(const Plan& plan, int micro_batches) {
  SimOptions options;
  options.micro_batches = micro_batches > 0 ? micro_batches : default_micro_batches(plan);
  options.policy = StartPolicy::Timetable;
  const SimResult sim = simulate(plan, options);
  const int gpus = plan.platform.gpus;

  Timeline timeline;
  timeline.title = "predicted: " + plan.profile + ", " + plan.algorithm + ", " +
                   std::to_string(sim.micro_batches) + " micro-batches, period " +
                   format_ms(plan.predicted.period_ms) + " per micro-batch";
  timeline.rows = gpu_rows(gpus);
  std::set<int> links;
  for (const SimOp& op : sim.ops)
    if (op.resource >= gpus) links.insert(op.resource);
  std::map<int, int> row_of_resource;
  for (int g = 0; g < gpus; ++g) row_of_resource[g] = g;
  for (int resource : links) {
    const int link = resource - gpus;
    row_of_resource[resource] = static_cast<int>(timeline.rows.size());
    timeline.rows.push_back("link " + std::to_string(link / gpus) + "↔" +
                            std::to_string(link % gpus));
  }
  for (const SimOp& op : sim.ops) {
    timeline.bars.push_back({row_of_resource.at(op.resource),
                             op_token(op.kind, op.stage, op.micro_batch), op.kind, op.stage,
                             op.micro_batch, 0, op.start_ms, op.end_ms});
  }
  sort_bars(timeline);
  timeline.markers = period_markers(plan, sim);
  timeline.total_ms = sim.step_ms;
  return timeline;
}

// The steps a trace timeline shows: the first `max_steps` traced (all when max_steps <= 0).
static std::set<int> shown_steps(const mplan::Trace& trace, int max_steps) {
  std::set<int> steps;
  for (const mplan::TraceOp& op : trace.ops) steps.insert(op.step);
  for (const mplan::TraceTransfer& transfer : trace.transfers) steps.insert(transfer.step);
  if (max_steps > 0 && steps.size() > static_cast<std::size_t>(max_steps))
    steps.erase(std::next(steps.begin(), max_steps), steps.end());
  return steps;
}

static std::string trace_title(const mplan::Trace& trace, const std::set<int>& steps) {
  std::string title = "measured: " + trace.profile + ", " + trace.algorithm + " on " +
                      trace.device + " (" + trace.mode + ")";
  if (!steps.empty()) {
    const int first = *steps.begin();
    const int last = *steps.rbegin();
    title += first == last ? ", step " + std::to_string(first)
                           : ", steps " + std::to_string(first) + "-" + std::to_string(last);
    title += " of " + std::to_string(trace.steps);
  }
  const double period = mplan::summarize(trace).measured_period_ms;
  if (period > 0) title += ", period " + madpipe::format_ms(period) + " per micro-batch";
  return title;
}

mplan::Timeline mplan::timeline_of_trace(const Trace& trace, int max_steps) {
  const std::set<int> steps = shown_steps(trace, max_steps);
  Timeline timeline;
  timeline.title = trace_title(trace, steps);
  timeline.rows = gpu_rows(trace.ranks);

  std::map<std::pair<int, int>, int> link_rows;  // (from, to) -> row
  for (const TraceTransfer& transfer : trace.transfers)
    if (steps.count(transfer.step))
      link_rows.emplace(std::make_pair(transfer.from, transfer.to), 0);
  for (auto& [link, row] : link_rows) {
    row = static_cast<int>(timeline.rows.size());
    timeline.rows.push_back("link " + std::to_string(link.first) + "→" +
                            std::to_string(link.second));
  }

  std::map<int, double> step_starts;
  for (const TraceOp& op : trace.ops) {
    if (!steps.count(op.step)) continue;
    const madpipe::schedule::OpKind kind =
        op.kind == TraceOpKind::Forward  ? madpipe::schedule::OpKind::F
        : op.kind == TraceOpKind::Weight ? madpipe::schedule::OpKind::W
                                         : madpipe::schedule::OpKind::B;
    timeline.bars.push_back({op.rank, op_token(kind, op.stage, op.micro_batch), kind, op.stage,
                             op.micro_batch, op.step, op.start_ms, op.end_ms});
  }
  for (const TraceTransfer& transfer : trace.transfers) {
    if (!steps.count(transfer.step)) continue;
    const madpipe::schedule::OpKind kind = transfer.kind == TraceTransferKind::Activation
                                               ? madpipe::schedule::OpKind::SendAct
                                               : madpipe::schedule::OpKind::SendGrad;
    timeline.bars.push_back({link_rows.at({transfer.from, transfer.to}),
                             op_token(kind, transfer.stage, transfer.micro_batch), kind,
                             transfer.stage, transfer.micro_batch, transfer.step, transfer.start_ms,
                             transfer.end_ms});
  }
  double origin = std::numeric_limits<double>::infinity();
  for (const TimelineBar& bar : timeline.bars) origin = std::min(origin, bar.start_ms);
  for (TimelineBar& bar : timeline.bars) {
    bar.start_ms -= origin;
    bar.end_ms -= origin;
    timeline.total_ms = std::max(timeline.total_ms, bar.end_ms);
    auto [it, inserted] = step_starts.emplace(bar.step, bar.start_ms);
    if (!inserted) it->second = std::min(it->second, bar.start_ms);
  }
  sort_bars(timeline);
  for (const auto& [step, start] : step_starts)
    timeline.markers.push_back({start, "step " + std::to_string(step)});
  std::stable_sort(
      timeline.markers.begin(), timeline.markers.end(),
      [](const TimelineMarker& a, const TimelineMarker& b) { return a.time_ms < b.time_ms; });
  return timeline;
}

// ---------------------------------------------------------------------------------------------
// Chrome trace-event format

static void add_chrome_events(const mplan::Timeline& timeline, int pid, nlohmann::json& events) {
  using nlohmann::json;
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", timeline.title}}}});
  events.push_back(
      {{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
  for (std::size_t row = 0; row < timeline.rows.size(); ++row) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", row},
                      {"args", {{"name", timeline.rows[row]}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"tid", row},
                      {"args", {{"sort_index", row}}}});
  }
  for (const mplan::TimelineBar& bar : timeline.bars) {
    json args = {{"stage", bar.stage}, {"micro_batch", bar.micro_batch}};
    if (bar.step > 0) args["step"] = bar.step;
    events.push_back({{"name", bar.label},
                      {"cat", ms::to_string(bar.kind)},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", bar.row},
                      {"ts", bar.start_ms * 1000.0},
                      {"dur", (bar.end_ms - bar.start_ms) * 1000.0},
                      {"args", std::move(args)}});
  }
  for (const mplan::TimelineMarker& marker : timeline.markers) {
    events.push_back({{"name", marker.label},
                      {"ph", "i"},
                      {"s", "p"},
                      {"pid", pid},
                      {"tid", 0},
                      {"ts", marker.time_ms * 1000.0}});
  }
}

nlohmann::json mplan::to_chrome_trace(const std::vector<Timeline>& timelines) {
  nlohmann::json events = nlohmann::json::array();
  for (std::size_t i = 0; i < timelines.size(); ++i)
    add_chrome_events(timelines[i], static_cast<int>(i), events);
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

nlohmann::json mplan::to_chrome_trace(const Timeline& timeline) {
  return to_chrome_trace(std::vector<Timeline>{timeline});
}
