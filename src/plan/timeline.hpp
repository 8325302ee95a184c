#pragma once

#include "plan/plan.hpp"
#include "plan/trace.hpp"
#include "schedule/pattern.hpp"

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::plan {

// A Gantt chart of one training step, predicted (from a plan) or measured (from a trace), in a
// form that renderers share: rows are GPUs and links, bars are operations on them.

struct TimelineBar {
  int row = 0;        // index in Timeline::rows
  std::string label;  // op_token(), e.g. "F2.7", "SEND_ACT1.3"
  schedule::OpKind kind = schedule::OpKind::F;
  int stage = 0;
  int micro_batch = 0;
  int step = 0;  // training step of a trace; 0 for a plan
  double start_ms = 0;
  double end_ms = 0;
};

// A vertical line across the timeline: the start of a pattern period or of a training step.
struct TimelineMarker {
  double time_ms = 0;
  std::string label;  // "period 3", "step 2"
};

struct Timeline {
  std::string title;
  std::vector<std::string> rows;  // "GPU 0", "GPU 1", ..., then links: "link 0↔1" or "link 0→1"
  std::vector<TimelineBar> bars;  // in start order
  std::vector<TimelineMarker> markers;  // in time order
  double total_ms = 0;                  // times run from 0 to total_ms
};

// The planner's schedule of one step of `micro_batches` micro-batches (0: enough to see the
// steady state, 2 * max(stages, largest NCA) rounded up to a multiple of k), as the simulator
// replays it with the timetable policy: one row per GPU, one per link the pattern uses (a link
// carries transfers in both directions, one at a time), markers where each pattern period
// begins. Throws Error{InvalidInput} when the pattern cannot run (see simulate()).
Timeline timeline_of_plan(const Plan& plan, int micro_batches = 0);

// What a run measured, over its first `max_steps` traced steps (all of them when <= 0): one row
// per rank, one per direction of a link that transfers used, markers at the start of each step;
// the title gives the measured period. Times start at 0 at the first op shown.
Timeline timeline_of_trace(const Trace& trace, int max_steps = 2);

// Chrome trace-event format (chrome://tracing, Perfetto): an "X" event per bar (tid = row,
// ts and dur in microseconds, args with stage, micro-batch and step), "M" events naming the
// process and the rows, and an instant event per marker. Several timelines become one process
// each (pid = their index).
nlohmann::json to_chrome_trace(const Timeline& timeline);
nlohmann::json to_chrome_trace(const std::vector<Timeline>& timelines);

// A standalone SVG document: the timelines stacked from top to bottom on one time axis, bars
// coloured by stage (forward and activation transfers lighter, backward and gradient transfers
// darker), micro-batch numbers inside bars wide enough for them, dashed marker lines, a time
// axis in ms and a legend of the stages.
std::string to_svg(const std::vector<Timeline>& timelines);

}  // namespace madpipe::plan
