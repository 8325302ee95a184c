#include "plan/trace.hpp"

#include "core/error.hpp"

#include <cstdint>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace mplan = madpipe::plan;
using nlohmann::json;

namespace {

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

// Two stages on two ranks, 8 micro-batches per step. Step s starts at 1000 * (s - 1); in it, F of
// stage t for micro-batch i starts at 10 * i + 3 * t (20 * i in the first step, which is slower)
// and lasts 2 ms, B at 100 + 10 * i + 3 * t and lasts 4 ms. The second step's period is 10 ms.
mplan::Trace synthetic_trace(int steps = 2) {
  mplan::Trace trace;
  trace.profile = "synthetic";
  trace.algorithm = "1f1b";
  trace.device = "cpu";
  trace.mode = "sync";
  trace.ranks = 2;
  trace.micro_batches = 8;
  trace.steps = steps;
  trace.predicted_period_ms = 8;
  trace.predicted_memory_bytes = {100, 0};
  trace.memory = {{0, 150, 4096, "B 1.3"}, {1, 300, 0, ""}};
  for (int step = 1; step <= steps; ++step) {
    const double base = 1000.0 * (step - 1);
    const double spacing = step == 1 ? 20.0 : 10.0;
    for (int i = 0; i < trace.micro_batches; ++i) {
      for (int stage = 0; stage < 2; ++stage) {
        const double forward = base + spacing * i + 3 * stage;
        const double backward = base + 100 + spacing * i + 3 * stage;
        trace.ops.push_back(
            {mplan::TraceOpKind::Forward, stage, stage, step, i, forward, forward + 2});
        trace.ops.push_back(
            {mplan::TraceOpKind::Backward, stage, stage, step, i, backward, backward + 4});
      }
      trace.transfers.push_back({mplan::TraceTransferKind::Activation, 0, step, i, 0, 1, 4096,
                                 base + spacing * i + 2, base + spacing * i + 2.5});
      trace.transfers.push_back({mplan::TraceTransferKind::Gradient, 0, step, i, 1, 0, 4096,
                                 base + 100 + spacing * i + 7, base + 100 + spacing * i + 7.5});
    }
  }
  return trace;
}

void expect_same_trace(const mplan::Trace& a, const mplan::Trace& b) {
  EXPECT_EQ(std::tie(a.profile, a.algorithm, a.device, a.mode, a.ranks, a.micro_batches, a.steps),
            std::tie(b.profile, b.algorithm, b.device, b.mode, b.ranks, b.micro_batches, b.steps));
  EXPECT_EQ(a.predicted_period_ms, b.predicted_period_ms);
  EXPECT_EQ(a.predicted_step_ms, b.predicted_step_ms);
  EXPECT_EQ(a.predicted_memory_bytes, b.predicted_memory_bytes);
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (std::size_t r = 0; r < a.memory.size(); ++r) {
    EXPECT_EQ(std::tie(a.memory[r].rank, a.memory[r].peak_bytes, a.memory[r].peak_rss_bytes,
                       a.memory[r].peak_at),
              std::tie(b.memory[r].rank, b.memory[r].peak_bytes, b.memory[r].peak_rss_bytes,
                       b.memory[r].peak_at));
  }
  ASSERT_EQ(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const mplan::TraceOp& x = a.ops[i];
    const mplan::TraceOp& y = b.ops[i];
    EXPECT_EQ(std::tie(x.kind, x.rank, x.stage, x.step, x.micro_batch, x.start_ms, x.end_ms),
              std::tie(y.kind, y.rank, y.stage, y.step, y.micro_batch, y.start_ms, y.end_ms))
        << "op " << i;
  }
  ASSERT_EQ(a.transfers.size(), b.transfers.size());
  for (std::size_t i = 0; i < a.transfers.size(); ++i) {
    const mplan::TraceTransfer& x = a.transfers[i];
    const mplan::TraceTransfer& y = b.transfers[i];
    EXPECT_EQ(std::tie(x.kind, x.stage, x.step, x.micro_batch, x.from, x.to, x.bytes, x.start_ms,
                       x.end_ms),
              std::tie(y.kind, y.stage, y.step, y.micro_batch, y.from, y.to, y.bytes, y.start_ms,
                       y.end_ms))
        << "transfer " << i;
  }
}

// The Error that reading `j` (as if from "run/trace.json") throws; fails the test if none.
madpipe::Error read_error(const json& j) {
  try {
    mplan::trace_from_json(j, "run/trace.json");
  } catch (const madpipe::Error& e) {
    return e;
  }
  ADD_FAILURE() << "the trace was accepted";
  return madpipe::Error(madpipe::ErrorKind::Internal, "", "", "");
}

json edited(const std::function<void(json&)>& edit) {
  json j = mplan::trace_to_json(synthetic_trace());
  edit(j);
  return j;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST(TraceIo, RoundTripsThroughAFile) {
  mplan::Trace trace = synthetic_trace();
  trace.ops[3].start_ms = 0.1 + 0.2;  // not exact in decimal: the writer must keep every digit
  trace.ops[3].end_ms = 1.0 / 3.0;
  trace.transfers[1].bytes = std::int64_t{1} << 40;
  const std::string path = temp_path("madpipe_trace_round_trip.json");
  mplan::write_trace(trace, path);
  expect_same_trace(trace, mplan::read_trace(path));
  EXPECT_EQ(mplan::trace_to_json(mplan::read_trace(path)), mplan::trace_to_json(trace));
}

TEST(TraceIo, WritesKeysInTheDocumentedOrderWithASummary) {
  const std::string path = temp_path("madpipe_trace_order.json");
  mplan::write_trace(synthetic_trace(), path);
  const std::string text = read_text(path);
  const std::vector<std::string> keys = {"\"format\": \"madpipe.trace/1\"",
                                         "\"profile\"",
                                         "\"algorithm\"",
                                         "\"device\"",
                                         "\"mode\"",
                                         "\"ranks\"",
                                         "\"micro_batches\"",
                                         "\"steps\"",
                                         "\"predicted\"",
                                         "\"summary\"",
                                         "\"memory\"",
                                         "\"ops\"",
                                         "\"transfers\""};
  std::size_t position = 0;
  for (const std::string& key : keys) {
    const std::size_t found = text.find(key, position);
    ASSERT_NE(found, std::string::npos) << key << " missing or out of order";
    position = found;
  }
  const json j = json::parse(text);
  EXPECT_DOUBLE_EQ(j["summary"]["measured_period_ms"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["summary"]["period_ratio"].get<double>(), 1.25);
  // One op per line.
  EXPECT_NE(text.find("\n    {\"rank\": 0, \"kind\": \"F\", \"stage\": 0, \"step\": 1, "
                      "\"micro_batch\": 0, \"start_ms\": 0.0, \"end_ms\": 2.0},\n"),
            std::string::npos);
}

TEST(TraceIo, ReadersIgnoreTheSummaryAndExtraFields) {
  const json j = edited([](json& t) {
    t["summary"] = "anything";
    t["ops"][0]["note"] = "extra";
  });
  expect_same_trace(mplan::trace_from_json(j), synthetic_trace());
}

TEST(TraceIo, RejectsAnotherFormat) {
  const madpipe::Error e = read_error(edited([](json& t) { t["format"] = "madpipe.plan/1"; }));
  EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
  EXPECT_EQ(e.file(), "run/trace.json");
  EXPECT_EQ(e.field(), "/format");
  EXPECT_EQ(e.problem(), "must be \"madpipe.trace/1\", got \"madpipe.plan/1\"");
  EXPECT_EQ(std::string(e.what()),
            "run/trace.json: /format: must be \"madpipe.trace/1\", got \"madpipe.plan/1\"");
  EXPECT_EQ(read_error(edited([](json& t) { t.erase("format"); })).field(), "/format");
}

TEST(TraceIo, RejectsAMissingField) {
  const madpipe::Error e = read_error(edited([](json& t) { t["ops"][4].erase("end_ms"); }));
  EXPECT_EQ(e.field(), "/ops/4/end_ms");
  EXPECT_EQ(e.problem(), "missing required field");
  EXPECT_EQ(read_error(edited([](json& t) { t.erase("transfers"); })).field(), "/transfers");
  EXPECT_EQ(read_error(edited([](json& t) { t["predicted"].erase("memory_bytes"); })).field(),
            "/predicted/memory_bytes");
  EXPECT_EQ(read_error(edited([](json& t) { t["memory"][1].erase("peak_bytes"); })).field(),
            "/memory/1/peak_bytes");
}

TEST(TraceIo, RejectsAnEndBeforeItsStart) {
  const madpipe::Error e = read_error(edited([](json& t) {
    t["ops"][1]["start_ms"] = 12.5;
    t["ops"][1]["end_ms"] = 11.0;
  }));
  EXPECT_EQ(e.field(), "/ops/1/end_ms");
  EXPECT_EQ(e.problem(), "must be >= start_ms (12.5), got 11.0");
  const madpipe::Error transfer =
      read_error(edited([](json& t) { t["transfers"][2]["end_ms"] = 0.0; }));
  EXPECT_EQ(transfer.field(), "/transfers/2/end_ms");
}

TEST(TraceIo, RejectsARankOutOfRange) {
  const madpipe::Error e = read_error(edited([](json& t) { t["ops"][2]["rank"] = 2; }));
  EXPECT_EQ(e.field(), "/ops/2/rank");
  EXPECT_EQ(e.problem(), "must be a rank in [0, 2), got 2");
  EXPECT_EQ(read_error(edited([](json& t) { t["transfers"][0]["to"] = -1; })).field(),
            "/transfers/0/to");
  EXPECT_EQ(read_error(edited([](json& t) { t["transfers"][3]["from"] = 7; })).field(),
            "/transfers/3/from");
  EXPECT_EQ(read_error(edited([](json& t) { t["memory"][1]["rank"] = 0; })).field(),
            "/memory/1/rank");
}

TEST(TraceIo, RejectsWrongTypesAndSigns) {
  EXPECT_EQ(read_error(edited([](json& t) { t["ops"][0]["start_ms"] = -1.0; })).problem(),
            "must be a finite number >= 0, got -1.0");
  EXPECT_EQ(read_error(edited([](json& t) { t["ops"][0]["kind"] = "R"; })).field(), "/ops/0/kind");
  EXPECT_EQ(read_error(edited([](json& t) { t["ops"][0]["micro_batch"] = 8; })).field(),
            "/ops/0/micro_batch");
  EXPECT_EQ(read_error(edited([](json& t) { t["ops"][0]["step"] = 0; })).field(), "/ops/0/step");
  EXPECT_EQ(read_error(edited([](json& t) { t["transfers"][0]["bytes"] = 1.5; })).field(),
            "/transfers/0/bytes");
  EXPECT_EQ(read_error(edited([](json& t) { t["transfers"][0]["kind"] = "weights"; })).problem(),
            "unknown transfer kind 'weights' (valid: activation, gradient)");
  EXPECT_EQ(read_error(edited([](json& t) { t["ranks"] = "2"; })).field(), "/ranks");
  EXPECT_EQ(read_error(edited([](json& t) { t["memory"].erase(1); })).field(), "/memory");
  EXPECT_EQ(read_error(json::array()).field(), "");
}

TEST(TraceIo, ReadErrorsNameTheFile) {
  const std::string path = temp_path("madpipe_trace_bad_rank.json");
  std::ofstream(path) << edited([](json& t) { t["ops"][5]["rank"] = 9; }).dump();
  try {
    mplan::read_trace(path);
    FAIL() << "the trace was accepted";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": /ops/5/rank: must be a rank in [0, 2), got 9");
  }
  const std::string broken = temp_path("madpipe_trace_broken.json");
  std::ofstream(broken) << "{\"format\": ";
  try {
    mplan::read_trace(broken);
    FAIL() << "broken JSON was accepted";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
  }
}

TEST(TraceIo, IoFailuresAreIoErrors) {
  try {
    mplan::read_trace(temp_path("no_such_trace.json"));
    FAIL() << "a missing file was read";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Io);
    EXPECT_EQ(e.file(), temp_path("no_such_trace.json"));
  }
  try {
    mplan::write_trace(synthetic_trace(), temp_path("no/such/dir/trace.json"));
    FAIL() << "wrote into a missing directory";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Io);
  }
}

TEST(TraceIo, RefusesToWriteAnInvalidTrace) {
  mplan::Trace trace = synthetic_trace();
  trace.ops[0].rank = 5;
  EXPECT_THROW(mplan::write_trace(trace, temp_path("madpipe_trace_invalid.json")), madpipe::Error);
}

TEST(TraceSummary, MeasuresTheSteadyPeriodLeavingOutTheFirstStep) {
  const mplan::TraceSummary summary = mplan::summarize(synthetic_trace());
  // Step 1 alone would give 20 ms, and the median of both 15 ms.
  EXPECT_DOUBLE_EQ(summary.measured_period_ms, 10.0);
  EXPECT_DOUBLE_EQ(summary.predicted_period_ms, 8.0);
  EXPECT_DOUBLE_EQ(summary.period_ratio, 1.25);
  // Step 2: first F at 1000, last B (micro-batch 7, stage 1) ends at 1000 + 100 + 70 + 3 + 4.
  EXPECT_DOUBLE_EQ(summary.step_ms, 177.0);
}

TEST(TraceSummary, UsesTheOnlyStepWhenThereIsOne) {
  const mplan::TraceSummary summary = mplan::summarize(synthetic_trace(1));
  EXPECT_DOUBLE_EQ(summary.measured_period_ms, 20.0);
  EXPECT_DOUBLE_EQ(summary.step_ms, 100 + 140 + 3 + 4);
}

TEST(TraceSummary, TakesTheMedianOverStages) {
  mplan::Trace trace = synthetic_trace(1);
  // Stage 1's forwards of micro-batches 2 and 5 (lo = 8 / 4, hi = 8 - 1 - 2) drift apart: with
  // two stages the median is the mean of 20 and 30.
  for (mplan::TraceOp& op : trace.ops)
    if (op.stage == 1 && op.kind == mplan::TraceOpKind::Forward && op.micro_batch == 5) {
      op.start_ms += 30;
      op.end_ms += 30;
    }
  EXPECT_DOUBLE_EQ(mplan::summarize(trace).measured_period_ms, 25.0);
}

TEST(TraceSummary, ReportsNoPeriodWithTooFewMicroBatches) {
  mplan::Trace trace = synthetic_trace(1);
  trace.micro_batches = 1;
  const mplan::TraceSummary summary = mplan::summarize(trace);
  EXPECT_EQ(summary.measured_period_ms, 0.0);
  EXPECT_EQ(summary.period_ratio, 0.0);
  EXPECT_NE(mplan::format_summary(summary).find("not measured"), std::string::npos);
}

TEST(TraceSummary, ComparesMemoryAndBusyTime) {
  const mplan::TraceSummary summary = mplan::summarize(synthetic_trace());
  EXPECT_EQ(summary.peak_bytes, (std::vector<std::int64_t>{150, 300}));
  EXPECT_EQ(summary.predicted_bytes, (std::vector<std::int64_t>{100, 0}));
  ASSERT_EQ(summary.memory_ratio.size(), 2u);
  EXPECT_DOUBLE_EQ(summary.memory_ratio[0], 1.5);
  EXPECT_EQ(summary.memory_ratio[1], 0.0);  // nothing predicted
  // Each rank computes 8 * (2 + 4) ms a step, over 1000 + 177 ms.
  ASSERT_EQ(summary.busy_fraction.size(), 2u);
  EXPECT_DOUBLE_EQ(summary.busy_fraction[0], 96.0 / 1177.0);
  EXPECT_DOUBLE_EQ(summary.busy_fraction[1], 96.0 / 1177.0);
}

TEST(TraceSummary, ComparesTheStepWithItsSimulation) {
  mplan::Trace trace = synthetic_trace();
  trace.predicted_step_ms = 160;
  const mplan::TraceSummary summary = mplan::summarize(trace);
  EXPECT_DOUBLE_EQ(summary.predicted_step_ms, 160.0);
  EXPECT_DOUBLE_EQ(summary.step_ratio, 177.0 / 160.0);
  EXPECT_NE(mplan::format_summary(summary).find("step 177.00 ms, predicted 160.00 ms (ratio 1.11)"),
            std::string::npos);
  // Written as predicted.step_ms, read back; a trace without it (2BW, older files) reads as 0.
  nlohmann::json j = mplan::trace_to_json(trace);
  EXPECT_DOUBLE_EQ(j["predicted"]["step_ms"].get<double>(), 160.0);
  EXPECT_DOUBLE_EQ(mplan::trace_from_json(j).predicted_step_ms, 160.0);
  j["predicted"].erase("step_ms");
  EXPECT_EQ(mplan::trace_from_json(j).predicted_step_ms, 0.0);
  j["predicted"]["step_ms"] = -1;
  EXPECT_THROW(mplan::trace_from_json(j), madpipe::Error);
}

TEST(TraceSummary, FormatsOneLinePerRank) {
  const std::string text = mplan::format_summary(mplan::summarize(synthetic_trace()));
  EXPECT_EQ(text,
            "measured period 10.00 ms per micro-batch, predicted 8.00 ms (ratio 1.25); step "
            "177.00 ms\n"
            "rank 0: peak 150 B (at B 1.3), predicted 100 B (ratio 1.50), busy 8%\n"
            "rank 1: peak 300 B, busy 8%\n");
}
