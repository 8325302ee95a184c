#include "plan/timeline.hpp"

#include "plan/plan.hpp"
#include "plan/simulate.hpp"
#include "plan/trace.hpp"
#include "schedule/pattern.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using ms::OpKind;
using nlohmann::json;

namespace {

// Three stages on three GPUs with transfers on links 0-1 and 1-2, one micro-batch at a time.
mplan::Plan three_gpu_plan() {
  const auto profile = mt::make_chain({1, 2, 3}, {2, 3, 4}, {10, 20, 30}, {100, 200, 300}, 50);
  return mt::chain_plan(profile, {0, 1, 2}, {0, 1, 2}, mt::small_platform(3), 0);
}

// `plan` with every op `delay_ms` later in the period: the same schedule, but period
// boundaries no longer fall on a start of F of stage 0.
mplan::Plan delayed(mplan::Plan plan, double delay_ms) {
  for (ms::Op& op : plan.pattern.ops) op.start_ms += delay_ms;
  ms::normalize(plan.pattern);
  return plan;
}

std::vector<mplan::Plan> sample_plans() {
  return {mt::pipelined_plan(),
          mt::repeated(mt::pipelined_plan(), 2),
          three_gpu_plan(),
          delayed(mt::pipelined_plan(), 1.5),
          delayed(mt::repeated(mt::pipelined_plan(), 2), 5.25),
          delayed(three_gpu_plan(), 2.0)};
}

int count_compute_bars(const mplan::Timeline& timeline) {
  int count = 0;
  for (const mplan::TimelineBar& bar : timeline.bars)
    count += bar.kind == OpKind::F || bar.kind == OpKind::B ? 1 : 0;
  return count;
}

// Two ranks, two steps of four micro-batches, starting 50 ms after the run's origin; step 2
// starts at 150 ms.
mplan::Trace small_trace() {
  mplan::Trace trace;
  trace.profile = "small";
  trace.algorithm = "1f1b";
  trace.device = "cpu";
  trace.mode = "sync";
  trace.ranks = 2;
  trace.micro_batches = 4;
  trace.steps = 2;
  trace.predicted_period_ms = 10;
  trace.predicted_memory_bytes = {1000, 1000};
  trace.memory = {{0, 900, 0, ""}, {1, 1100, 0, ""}};
  for (int step = 1; step <= 2; ++step) {
    const double base = 50 + 100.0 * (step - 1);
    for (int i = 0; i < 4; ++i) {
      const double t = base + 10 * i;
      trace.ops.push_back({mplan::TraceOpKind::Forward, 0, 0, step, i, t, t + 4});
      trace.ops.push_back({mplan::TraceOpKind::Forward, 1, 1, step, i, t + 5, t + 9});
      trace.ops.push_back({mplan::TraceOpKind::Backward, 1, 1, step, i, t + 50, t + 54});
      trace.ops.push_back({mplan::TraceOpKind::Backward, 0, 0, step, i, t + 55, t + 59});
      trace.transfers.push_back(
          {mplan::TraceTransferKind::Activation, 0, step, i, 0, 1, 64, t + 4, t + 5});
      trace.transfers.push_back(
          {mplan::TraceTransferKind::Gradient, 0, step, i, 1, 0, 64, t + 54, t + 55});
    }
  }
  return trace;
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++count;
  return count;
}

}  // namespace

TEST(PlanTimeline, HasOneRowPerGpuAndPerLinkUsed) {
  EXPECT_EQ(mplan::timeline_of_plan(mt::pipelined_plan(), 4).rows,
            (std::vector<std::string>{"GPU 0", "GPU 1", "link 0↔1"}));
  EXPECT_EQ(mplan::timeline_of_plan(three_gpu_plan(), 4).rows,
            (std::vector<std::string>{"GPU 0", "GPU 1", "GPU 2", "link 0↔1", "link 1↔2"}));
  // A GPU without stages still has its row; no transfer crosses to it.
  const mplan::Plan idle =
      mt::chain_plan(mt::two_layer_profile(), {0, 1}, {0, 1}, mt::small_platform(3), 4.0);
  EXPECT_EQ(mplan::timeline_of_plan(idle, 4).rows,
            (std::vector<std::string>{"GPU 0", "GPU 1", "GPU 2", "link 0↔1"}));
}

TEST(PlanTimeline, HasAForwardAndABackwardPerStageAndMicroBatch) {
  for (const mplan::Plan& plan : sample_plans()) {
    for (int n : {2, 6}) {
      const mplan::Timeline timeline = mplan::timeline_of_plan(plan, n);
      EXPECT_EQ(count_compute_bars(timeline), 2 * static_cast<int>(plan.stages.size()) * n);
      for (const mplan::TimelineBar& bar : timeline.bars) {
        EXPECT_EQ(bar.label, ms::op_token(bar.kind, bar.stage, bar.micro_batch));
        EXPECT_GE(bar.start_ms, 0.0);
        EXPECT_LE(bar.end_ms, timeline.total_ms + 1e-9);
      }
    }
  }
}

TEST(PlanTimeline, TimesAreTheSimulatorsTimetableReplay) {
  for (const mplan::Plan& plan : sample_plans()) {
    const int n = 6;
    const mplan::Timeline timeline = mplan::timeline_of_plan(plan, n);
    mplan::SimOptions options;
    options.micro_batches = n;
    const mplan::SimResult sim = mplan::simulate(plan, options);
    ASSERT_EQ(timeline.bars.size(), sim.ops.size());
    std::map<std::string, const mplan::TimelineBar*> by_label;
    for (const mplan::TimelineBar& bar : timeline.bars) by_label[bar.label] = &bar;
    for (const mplan::SimOp& op : sim.ops) {
      const std::string label = ms::op_token(op.kind, op.stage, op.micro_batch);
      ASSERT_TRUE(by_label.count(label)) << label;
      const mplan::TimelineBar& bar = *by_label[label];
      EXPECT_EQ(bar.start_ms, op.start_ms) << label;
      EXPECT_EQ(bar.end_ms, op.end_ms) << label;
      const std::string& row = timeline.rows[bar.row];
      if (op.resource < plan.platform.gpus) {
        EXPECT_EQ(row, "GPU " + std::to_string(op.resource)) << label;
      } else {
        EXPECT_EQ(row.rfind("link ", 0), 0u) << label;
      }
    }
    EXPECT_EQ(timeline.total_ms, sim.step_ms);
  }
}

TEST(PlanTimeline, MarksEveryPatternPeriod) {
  for (const mplan::Plan& plan : sample_plans()) {
    const mplan::Timeline timeline = mplan::timeline_of_plan(plan, 6);
    const double period = plan.pattern.period_ms;
    ASSERT_GE(timeline.markers.size(), 2u);
    EXPECT_LT(timeline.markers.front().time_ms, period);
    EXPECT_GT(timeline.markers.back().time_ms, timeline.total_ms - period);
    for (std::size_t i = 1; i < timeline.markers.size(); ++i)
      EXPECT_NEAR(timeline.markers[i].time_ms - timeline.markers[i - 1].time_ms, period, 1e-9);
    EXPECT_EQ(timeline.markers.front().label, "period 1");
    // Markers are where periods begin: F of stage 0 for micro-batch i starts at its op's
    // start_ms after one of them.
    const int k = plan.pattern.k;
    for (const mplan::TimelineBar& bar : timeline.bars) {
      if (bar.kind != OpKind::F || bar.stage != 0) continue;
      double start_in_period = -1;
      for (const ms::Op& op : plan.pattern.ops)
        if (op.kind == OpKind::F && op.stage == 0 &&
            ((op.shift % k) + k) % k == bar.micro_batch % k)
          start_in_period = op.start_ms;
      const double periods =
          (bar.start_ms - start_in_period - timeline.markers[0].time_ms) / period;
      EXPECT_NEAR(periods, std::round(periods), 1e-9) << bar.label;
    }
  }
}

TEST(PlanTimeline, DefaultsToEnoughMicroBatchesForTheSteadyState) {
  const mplan::Plan plan = mt::repeated(mt::pipelined_plan(), 2);
  const mplan::Timeline timeline = mplan::timeline_of_plan(plan, 0);
  const int micro_batches = count_compute_bars(timeline) / 4;  // 2 stages, F and B
  EXPECT_GE(micro_batches, 4);                                 // 2 * max(stages, NCA)
  EXPECT_EQ(micro_batches % plan.pattern.k, 0);
  EXPECT_NE(timeline.title.find(std::to_string(micro_batches) + " micro-batches"),
            std::string::npos);
}

TEST(TraceTimeline, ShowsTheFirstStepsFromZero) {
  const mplan::Timeline one = mplan::timeline_of_trace(small_trace(), 1);
  EXPECT_EQ(one.rows, (std::vector<std::string>{"GPU 0", "GPU 1", "link 0→1", "link 1→0"}));
  EXPECT_EQ(one.bars.size(), 4u * 6u);
  for (const mplan::TimelineBar& bar : one.bars) EXPECT_EQ(bar.step, 1);
  EXPECT_EQ(one.bars.front().start_ms, 0.0);  // 50 ms after the run's origin
  EXPECT_EQ(one.bars.front().label, "F0.0");
  EXPECT_EQ(one.total_ms, 30 + 59);
  ASSERT_EQ(one.markers.size(), 1u);
  EXPECT_EQ(one.markers[0].label, "step 1");

  const mplan::Timeline both = mplan::timeline_of_trace(small_trace(), 0);
  EXPECT_EQ(both.bars.size(), 2u * 4u * 6u);
  ASSERT_EQ(both.markers.size(), 2u);
  EXPECT_EQ(both.markers[1].label, "step 2");
  EXPECT_EQ(both.markers[1].time_ms, 100.0);
  EXPECT_NE(both.title.find("period 10.00 ms per micro-batch"), std::string::npos);
  for (const mplan::TimelineBar& bar : both.bars) {
    const std::string expected_row = bar.kind == OpKind::SendAct ? "link 0→1"
                                     : bar.kind == OpKind::SendGrad
                                         ? "link 1→0"
                                         : "GPU " + std::to_string(bar.stage);
    EXPECT_EQ(both.rows[bar.row], expected_row) << bar.label;
  }
}

TEST(TimelineSvg, IsAStandaloneDocumentWithEveryRow) {
  const std::vector<mplan::Timeline> timelines = {mplan::timeline_of_plan(three_gpu_plan(), 4),
                                                  mplan::timeline_of_trace(small_trace(), 2)};
  const std::string svg = mplan::to_svg(timelines);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  for (const mplan::Timeline& timeline : timelines) {
    for (const std::string& row : timeline.rows)
      EXPECT_NE(svg.find(">" + row + "<"), std::string::npos) << row;
  }
  // One rectangle with a tooltip per bar, dashed lines for markers, a legend entry per stage.
  EXPECT_EQ(count_of(svg, "<title>"), timelines[0].bars.size() + timelines[1].bars.size());
  EXPECT_EQ(count_of(svg, "stroke-dasharray"),
            timelines[0].markers.size() + timelines[1].markers.size());
  for (int stage = 0; stage < 3; ++stage)
    EXPECT_NE(svg.find(">stage " + std::to_string(stage) + "<"), std::string::npos);
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<"), count_of(svg, ">"));
}

TEST(TimelineSvg, EscapesText) {
  mplan::Timeline timeline = mplan::timeline_of_plan(mt::pipelined_plan(), 2);
  timeline.title = "plan <a> & \"b\"";
  const std::string svg = mplan::to_svg({timeline});
  EXPECT_NE(svg.find("plan &lt;a&gt; &amp; &quot;b&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<a>"), std::string::npos);
}

TEST(TimelineSvg, DrawsEmptyTimelines) {
  const std::string svg = mplan::to_svg({mplan::Timeline{}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(TimelineChrome, HasOneCompleteEventPerBar) {
  const mplan::Timeline timeline = mplan::timeline_of_plan(three_gpu_plan(), 4);
  const json trace = mplan::to_chrome_trace(timeline);
  std::size_t complete = 0;
  std::map<int, std::string> thread_names;
  for (const json& event : trace.at("traceEvents")) {
    EXPECT_EQ(event.at("pid"), 0);
    if (event.at("ph") == "M" && event.at("name") == "thread_name")
      thread_names[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
    if (event.at("ph") != "X") continue;
    ASSERT_LT(complete, timeline.bars.size());
    const mplan::TimelineBar& bar = timeline.bars[complete++];
    EXPECT_EQ(event.at("name"), bar.label);
    EXPECT_EQ(event.at("tid"), bar.row);
    EXPECT_EQ(event.at("ts").get<double>(), bar.start_ms * 1000);
    EXPECT_EQ(event.at("dur").get<double>(), (bar.end_ms - bar.start_ms) * 1000);
    EXPECT_EQ(event.at("args").at("stage"), bar.stage);
    EXPECT_EQ(event.at("args").at("micro_batch"), bar.micro_batch);
  }
  EXPECT_EQ(complete, timeline.bars.size());
  ASSERT_EQ(thread_names.size(), timeline.rows.size());
  for (std::size_t row = 0; row < timeline.rows.size(); ++row)
    EXPECT_EQ(thread_names[static_cast<int>(row)], timeline.rows[row]);
}

TEST(TimelineChrome, GivesEachTimelineItsProcess) {
  const std::vector<mplan::Timeline> timelines = {mplan::timeline_of_plan(mt::pipelined_plan(), 4),
                                                  mplan::timeline_of_trace(small_trace(), 2)};
  const json trace = mplan::to_chrome_trace(timelines);
  std::map<int, std::size_t> complete;
  std::map<int, std::size_t> instants;
  std::map<int, std::string> process_names;
  for (const json& event : trace.at("traceEvents")) {
    const int pid = event.at("pid").get<int>();
    if (event.at("ph") == "X") ++complete[pid];
    if (event.at("ph") == "i") ++instants[pid];
    if (event.at("ph") == "M" && event.at("name") == "process_name")
      process_names[pid] = event.at("args").at("name").get<std::string>();
  }
  for (int pid : {0, 1}) {
    EXPECT_EQ(complete[pid], timelines[pid].bars.size());
    EXPECT_EQ(instants[pid], timelines[pid].markers.size());
    EXPECT_EQ(process_names[pid], timelines[pid].title);
  }
  // The trace's bars carry their training step.
  for (const json& event : trace.at("traceEvents")) {
    if (event.at("ph") == "X" && event.at("pid") == 1) {
      EXPECT_TRUE(event.at("args").contains("step"));
    }
  }
}
