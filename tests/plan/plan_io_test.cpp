#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "support/schedule_support.hpp"
#include "support/test_support.hpp"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mt = madpipe::testing;
using nlohmann::json;

namespace {

// Two stages on two GPUs (f = 1, b = 2, 0.5 ms transfers), 1-periodic pattern of period 4.
mplan::Plan sample_plan(bool with_solver) {
  mplan::Plan plan = mt::pipelined_plan();
  mplan::fill_predicted(plan, 3.0);
  if (with_solver) {
    mplan::SolverInfo solver;
    solver.backend = "cbc";
    solver.status = "optimal";
    solver.objective = 4.0;
    solver.bound = 3.9999999;
    solver.gap = 2.5e-8;
    solver.seconds = 0.125;
    plan.solver = solver;
  }
  return plan;
}

void expect_same_plan(const mplan::Plan& a, const mplan::Plan& b) {
  EXPECT_EQ(a.profile, b.profile);
  EXPECT_EQ(a.platform, b.platform);
  EXPECT_EQ(a.algorithm, b.algorithm);
  EXPECT_EQ(a.stages, b.stages);
  EXPECT_EQ(a.pattern, b.pattern);
  EXPECT_EQ(a.predicted.period_ms, b.predicted.period_ms);
  EXPECT_EQ(a.predicted.throughput_per_s, b.predicted.throughput_per_s);
  EXPECT_EQ(a.predicted.lower_bound_period_ms, b.predicted.lower_bound_period_ms);
  EXPECT_EQ(a.predicted.memory_bytes, b.predicted.memory_bytes);
  ASSERT_EQ(a.solver.has_value(), b.solver.has_value());
  if (!a.solver) return;
  EXPECT_EQ(a.solver->backend, b.solver->backend);
  EXPECT_EQ(a.solver->status, b.solver->status);
  EXPECT_EQ(a.solver->objective, b.solver->objective);
  EXPECT_EQ(a.solver->bound, b.solver->bound);
  EXPECT_EQ(a.solver->gap, b.solver->gap);
  EXPECT_EQ(a.solver->seconds, b.solver->seconds);
}

std::string to_text(const mplan::Plan& plan) {
  std::ostringstream out;
  mplan::write_plan(plan, out);
  return out.str();
}

mplan::Plan from_text(const std::string& text) { return mplan::plan_from_json(json::parse(text)); }

std::size_t op_index(const mplan::Plan& plan, ms::OpKind kind, int stage) {
  for (std::size_t i = 0; i < plan.pattern.ops.size(); ++i)
    if (plan.pattern.ops[i].kind == kind && plan.pattern.ops[i].stage == stage) return i;
  return plan.pattern.ops.size();
}

// Runs plan_from_json on a modified copy of the sample plan's JSON and returns the error.
madpipe::Error read_error(const std::function<void(json&)>& edit) {
  json j = mplan::plan_to_json(sample_plan(true));
  edit(j);
  try {
    mplan::plan_from_json(j, "plan.json");
  } catch (const madpipe::Error& e) {
    return e;
  }
  ADD_FAILURE() << "plan_from_json accepted the edited plan";
  return madpipe::Error(madpipe::ErrorKind::Internal, "", "", "");
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

TEST(PlanIo, RoundTripThroughJson) {
  for (bool with_solver : {false, true}) {
    const mplan::Plan plan = sample_plan(with_solver);
    expect_same_plan(mplan::plan_from_json(mplan::plan_to_json(plan)), plan);
  }
}

TEST(PlanIo, RoundTripThroughTextKeepsEveryBit) {
  mplan::Plan plan = sample_plan(true);
  plan.stages[0].forward_ms = 0.1 + 0.2;
  plan.stages[1].backward_ms = 1.0 / 3.0;
  plan.pattern.ops[0].start_ms = std::nextafter(0.0, 1.0);
  plan.stages[0].weight_bytes = std::numeric_limits<std::int64_t>::max();
  plan.stages[1].remat = ms::RematStrategy::Rotor;
  plan.stages[1].offload = ms::OffloadStrategy::Host;
  plan.pattern.ops[2].shift = -5;
  expect_same_plan(from_text(to_text(plan)), plan);
}

TEST(PlanIo, DoubleWriteIsByteIdentical) {
  const mplan::Plan plan = sample_plan(true);
  const std::string first = to_text(plan);
  EXPECT_EQ(to_text(plan), first);
  EXPECT_EQ(to_text(from_text(first)), first);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.back(), '\n');
}

TEST(PlanIo, KeysComeInTheDocumentedOrder) {
  const std::string text = to_text(sample_plan(true));
  std::size_t previous = 0;
  for (const char* key : {"\"format\"",
                          "\"profile\"",
                          "\"platform\"",
                          "\"gpus\"",
                          "\"memory_bytes\"",
                          "\"bandwidth_bytes_per_ms\"",
                          "\"weight_copies\"",
                          "\"algorithm\"",
                          "\"stages\"",
                          "\"id\"",
                          "\"first_layer\"",
                          "\"last_layer\"",
                          "\"gpu\"",
                          "\"forward_ms\"",
                          "\"backward_ms\"",
                          "\"weight_bytes\"",
                          "\"stored_bytes\"",
                          "\"output_bytes\"",
                          "\"workspace_bytes\"",
                          "\"remat\"",
                          "\"offload\"",
                          "\"pattern\"",
                          "\"period_ms\"",
                          "\"k\"",
                          "\"ops\"",
                          "\"kind\"",
                          "\"stage\"",
                          "\"start_ms\"",
                          "\"duration_ms\"",
                          "\"shift\"",
                          "\"predicted\"",
                          "\"throughput_per_s\"",
                          "\"lower_bound_period_ms\"",
                          "\"solver\"",
                          "\"backend\"",
                          "\"status\"",
                          "\"objective\"",
                          "\"bound\"",
                          "\"gap\"",
                          "\"seconds\""}) {
    const std::size_t at = text.find(key, previous);
    ASSERT_NE(at, std::string::npos) << key << " missing after offset " << previous;
    previous = at;
  }
  EXPECT_EQ(text.rfind("{\n  \"format\": \"madpipe.plan/1\",\n", 0), 0u) << text;
}

TEST(PlanIo, OneOpPerLine) {
  const std::string text = to_text(sample_plan(false));
  EXPECT_NE(text.find("{\"kind\": \"SEND_ACT\", \"stage\": 0, \"link\": [0, 1], \"start_ms\": 1.0, "
                      "\"duration_ms\": 0.5, \"shift\": 1}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"remat\": {\"strategy\": \"none\"}"), std::string::npos);
  EXPECT_EQ(text.find("\"solver\""), std::string::npos);
  EXPECT_EQ(text.find('\t'), std::string::npos);
}

TEST(PlanIo, TransfersCarryLinksAndComputeOpsCarryGpus) {
  const json j = mplan::plan_to_json(sample_plan(false));
  for (const json& op : j["pattern"]["ops"]) {
    const bool transfer = op["kind"] == "SEND_ACT" || op["kind"] == "SEND_GRAD";
    EXPECT_EQ(op.contains("link"), transfer) << op.dump();
    EXPECT_EQ(op.contains("gpu"), !transfer) << op.dump();
  }
  EXPECT_EQ(j["format"], mplan::kPlanFormat);
  EXPECT_FALSE(j.contains("solver"));
}

TEST(PlanIo, OptionalStageFieldsDefault) {
  json j = mplan::plan_to_json(sample_plan(false));
  for (json& stage : j["stages"]) {
    stage.erase("workspace_bytes");
    stage.erase("remat");
    stage.erase("offload");
  }
  j["stages"][0]["workspace_bytes"] = 77;
  j["stages"][1]["remat"] = {{"strategy", "rotor"}, {"sequence", json::array({1, 2})}};
  j["extra"] = "ignored";
  j["pattern"]["ops"][0]["comment"] = "ignored too";
  const mplan::Plan plan = mplan::plan_from_json(j);
  EXPECT_EQ(plan.stages[0].workspace_bytes, 77);
  EXPECT_EQ(plan.stages[1].workspace_bytes, 0);
  EXPECT_EQ(plan.stages[0].remat, ms::RematStrategy::None);
  EXPECT_EQ(plan.stages[1].remat, ms::RematStrategy::Rotor);
  EXPECT_EQ(plan.stages[0].offload, ms::OffloadStrategy::None);
}

TEST(PlanIo, IntegralFloatsAreAcceptedForSizes) {
  json j = mplan::plan_to_json(sample_plan(false));
  j["predicted"]["memory_bytes"] = json::array({7.9e9, 6.1e9});
  j["platform"]["memory_bytes"] = 8.0e9;
  const mplan::Plan plan = mplan::plan_from_json(j);
  EXPECT_EQ(plan.predicted.memory_bytes, (std::vector<std::int64_t>{7'900'000'000, 6'100'000'000}));
  EXPECT_EQ(plan.platform.memory_bytes, 8'000'000'000);
}

TEST(PlanIo, RejectsNegativeStart) {
  const madpipe::Error e = read_error([](json& j) { j["pattern"]["ops"][3]["start_ms"] = -1; });
  EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
  EXPECT_EQ(e.file(), "plan.json");
  EXPECT_EQ(e.field(), "/pattern/ops/3/start_ms");
  EXPECT_EQ(e.problem(), "must be a finite number >= 0, got -1");
  EXPECT_EQ(std::string(e.what()),
            "plan.json: /pattern/ops/3/start_ms: must be a finite number >= 0, got -1");
}

// Strategies are names of a table: one outside it is refused where the plan is read.
TEST(PlanIo, RejectsUnknownStrategies) {
  madpipe::Error e = read_error([](json& j) { j["stages"][0]["remat"]["strategy"] = "magic"; });
  EXPECT_EQ(e.field(), "/stages/0/remat/strategy");
  EXPECT_EQ(e.problem(), "must be \"none\" or \"rotor\", got \"magic\"");
  e = read_error([](json& j) { j["stages"][0]["offload"]["strategy"] = "activations"; });
  EXPECT_EQ(e.field(), "/stages/0/offload/strategy");
  EXPECT_EQ(e.problem(), "must be \"none\" or \"host\", got \"activations\"");
}

TEST(PlanIo, RejectsNaN) {
  const madpipe::Error e = read_error([](json& j) { j["stages"][0]["forward_ms"] = std::nan(""); });
  EXPECT_EQ(e.field(), "/stages/0/forward_ms");
  EXPECT_EQ(e.problem(), "must be a finite number >= 0, got NaN");
}

TEST(PlanIo, RejectsMissingFields) {
  struct Case {
    std::function<void(json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j.erase("format"); }, "/format"},
      {[](json& j) { j.erase("profile"); }, "/profile"},
      {[](json& j) { j.erase("platform"); }, "/platform"},
      {[](json& j) { j["platform"].erase("bandwidth_bytes_per_ms"); },
       "/platform/bandwidth_bytes_per_ms"},
      {[](json& j) { j.erase("algorithm"); }, "/algorithm"},
      {[](json& j) { j.erase("stages"); }, "/stages"},
      {[](json& j) { j["stages"][1].erase("stored_bytes"); }, "/stages/1/stored_bytes"},
      {[](json& j) { j["pattern"].erase("k"); }, "/pattern/k"},
      {[](json& j) { j["pattern"]["ops"][2].erase("shift"); }, "/pattern/ops/2/shift"},
      {[](json& j) { j.erase("predicted"); }, "/predicted"},
      {[](json& j) { j["predicted"].erase("memory_bytes"); }, "/predicted/memory_bytes"},
      {[](json& j) { j["solver"].erase("seconds"); }, "/solver/seconds"},
  };
  for (const Case& c : cases) {
    const madpipe::Error e = read_error(c.edit);
    EXPECT_EQ(e.field(), c.field);
    EXPECT_EQ(e.problem(), "missing required field") << c.field;
  }
}

TEST(PlanIo, RejectsWrongTypesAndSigns) {
  struct Case {
    std::function<void(json&)> edit;
    const char* field;
    const char* problem;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["platform"]["gpus"] = "4"; }, "/platform/gpus",
       "must be an integer >= 1, got \"4\""},
      {[](json& j) { j["platform"]["gpus"] = 0; }, "/platform/gpus",
       "must be an integer >= 1, got 0"},
      {[](json& j) { j["platform"]["bandwidth_bytes_per_ms"] = 0; },
       "/platform/bandwidth_bytes_per_ms", "must be a finite number > 0, got 0"},
      {[](json& j) { j["platform"] = json::array(); }, "/platform", "must be an object, got []"},
      {[](json& j) { j["stages"][1]["weight_bytes"] = 1.5; }, "/stages/1/weight_bytes",
       "must be an integer >= 0, got 1.5"},
      {[](json& j) { j["stages"][0]["gpu"] = -1; }, "/stages/0/gpu",
       "must be an integer >= 0, got -1"},
      {[](json& j) { j["stages"][0]["remat"] = "none"; }, "/stages/0/remat",
       "must be an object, got \"none\""},
      {[](json& j) { j["stages"][0]["offload"] = json::object(); }, "/stages/0/offload/strategy",
       "missing required field"},
      {[](json& j) { j["stages"] = json::object(); }, "/stages", "must be an array, got {}"},
      {[](json& j) { j["pattern"]["period_ms"] = 0.0; }, "/pattern/period_ms",
       "must be a finite number > 0, got 0.0"},
      {[](json& j) { j["pattern"]["k"] = 0; }, "/pattern/k", "must be an integer >= 1, got 0"},
      {[](json& j) { j["pattern"]["ops"][1]["duration_ms"] = true; }, "/pattern/ops/1/duration_ms",
       "must be a finite number >= 0, got true"},
      {[](json& j) { j["pattern"]["ops"][0]["shift"] = 0.5; }, "/pattern/ops/0/shift",
       "must be an integer, got 0.5"},
      {[](json& j) { j["predicted"]["memory_bytes"][1] = -3; }, "/predicted/memory_bytes/1",
       "must be an integer >= 0, got -3"},
      {[](json& j) { j["solver"]["objective"] = nullptr; }, "/solver/objective",
       "must be a finite number, got null"},
      {[](json& j) { j["profile"] = 3; }, "/profile", "must be a string, got 3"},
      {[](json& j) { j["platform"]["gpus_per_node"] = -1; }, "/platform/gpus_per_node",
       "must be an integer >= 0, got -1"},
      {[](json& j) { j["platform"]["gpus_per_node"] = 1.5; }, "/platform/gpus_per_node",
       "must be an integer >= 0, got 1.5"},
      {[](json& j) { j["platform"]["gpus_per_node"] = std::nan(""); }, "/platform/gpus_per_node",
       "must be an integer >= 0, got NaN"},
      {[](json& j) { j["platform"]["inter_node_bandwidth_bytes_per_ms"] = -5; },
       "/platform/inter_node_bandwidth_bytes_per_ms", "must be a finite number >= 0, got -5"},
      {[](json& j) { j["platform"]["inter_node_bandwidth_bytes_per_ms"] = std::nan(""); },
       "/platform/inter_node_bandwidth_bytes_per_ms", "must be a finite number >= 0, got NaN"},
      {[](json& j) { j["platform"]["inter_node_bandwidth_bytes_per_ms"] = "fast"; },
       "/platform/inter_node_bandwidth_bytes_per_ms", "must be a finite number >= 0, got \"fast\""},
  };
  for (const Case& c : cases) {
    const madpipe::Error e = read_error(c.edit);
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), c.field);
    EXPECT_EQ(e.problem(), c.problem) << c.field;
  }
}

TEST(PlanIo, RejectsWrongFormat) {
  const madpipe::Error e = read_error([](json& j) { j["format"] = "madpipe.plan/2"; });
  EXPECT_EQ(e.field(), "/format");
  EXPECT_EQ(e.problem(), "must be \"madpipe.plan/1\", got \"madpipe.plan/2\"");
  const madpipe::Error profile = read_error([](json& j) { j["format"] = "madpipe.profile/1"; });
  EXPECT_EQ(profile.field(), "/format");
}

TEST(PlanIo, RejectsNonObjectRoot) {
  try {
    mplan::plan_from_json(json::array({1, 2}), "x.json");
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), "");
    EXPECT_NE(e.problem().find("must be a JSON object"), std::string::npos);
  }
}

TEST(PlanIo, UnknownOpKindListsValidKinds) {
  const madpipe::Error e = read_error([](json& j) { j["pattern"]["ops"][4]["kind"] = "RECV"; });
  EXPECT_EQ(e.field(), "/pattern/ops/4/kind");
  for (const char* name : {"RECV", "F", "B", "SEND_ACT", "SEND_GRAD"})
    EXPECT_NE(e.problem().find(name), std::string::npos) << name;
}

TEST(PlanIo, TransferNeedsALinkAndComputeNeedsAGpu) {
  const mplan::Plan plan = sample_plan(false);
  const std::size_t send = op_index(plan, ms::OpKind::SendAct, 0);
  const std::size_t forward = op_index(plan, ms::OpKind::F, 1);
  ASSERT_LT(send, plan.pattern.ops.size());
  ASSERT_LT(forward, plan.pattern.ops.size());
  const std::string send_ptr = "/pattern/ops/" + std::to_string(send);
  const std::string forward_ptr = "/pattern/ops/" + std::to_string(forward);

  madpipe::Error e = read_error([&](json& j) { j["pattern"]["ops"][send].erase("link"); });
  EXPECT_EQ(e.field(), send_ptr + "/link");
  EXPECT_EQ(e.problem(), "missing required field");

  e = read_error([&](json& j) { j["pattern"]["ops"][send]["link"] = json::array({0, 1, 2}); });
  EXPECT_EQ(e.field(), send_ptr + "/link");

  e = read_error([&](json& j) { j["pattern"]["ops"][send]["link"] = json::array({0, "1"}); });
  EXPECT_EQ(e.field(), send_ptr + "/link/1");

  e = read_error([&](json& j) { j["pattern"]["ops"][forward].erase("gpu"); });
  EXPECT_EQ(e.field(), forward_ptr + "/gpu");
  EXPECT_EQ(e.problem(), "missing required field");
}

TEST(PlanIo, RejectsUnknownSolverStatus) {
  const madpipe::Error e = read_error([](json& j) { j["solver"]["status"] = "great"; });
  EXPECT_EQ(e.field(), "/solver/status");
  EXPECT_NE(e.problem().find("optimal"), std::string::npos);
  EXPECT_NE(e.problem().find("timeout"), std::string::npos);
}

TEST(PlanIo, WritesAndReadsFiles) {
  const std::string path = temp_path("madpipe_plan_io_test.json");
  std::remove(path.c_str());
  const mplan::Plan plan = sample_plan(true);
  mplan::write_plan(plan, path);
  EXPECT_TRUE(file_exists(path));
  EXPECT_FALSE(file_exists(path + ".tmp"));
  expect_same_plan(mplan::read_plan(path), plan);

  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  EXPECT_EQ(contents.str(), to_text(plan));

  // Overwriting replaces the file.
  mplan::Plan other = sample_plan(false);
  other.algorithm = "other";
  mplan::write_plan(other, path);
  EXPECT_EQ(mplan::read_plan(path).algorithm, "other");
  std::remove(path.c_str());
}

TEST(PlanIo, FileErrors) {
  const std::string missing = temp_path("madpipe_no_such_dir/plan.json");
  try {
    mplan::write_plan(sample_plan(false), missing);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Io);
    EXPECT_EQ(e.file(), missing);
  }
  try {
    mplan::read_plan(missing);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Io);
    EXPECT_EQ(e.file(), missing);
  }
  const std::string broken = temp_path("madpipe_broken_plan.json");
  {
    std::ofstream out(broken);
    out << "{\"format\": \"madpipe.plan/1\",";
  }
  try {
    mplan::read_plan(broken);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    EXPECT_EQ(e.file(), broken);
    EXPECT_NE(e.problem().find("invalid JSON"), std::string::npos);
  }
  std::remove(broken.c_str());
}

TEST(PlanIo, ReadPlanNamesTheFileInFieldErrors) {
  const std::string path = temp_path("madpipe_bad_plan.json");
  json j = mplan::plan_to_json(sample_plan(false));
  j["pattern"]["ops"][3]["start_ms"] = -1;
  {
    std::ofstream out(path);
    out << j.dump();
  }
  try {
    mplan::read_plan(path);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.file(), path);
    EXPECT_EQ(e.field(), "/pattern/ops/3/start_ms");
  }
  std::remove(path.c_str());
}

TEST(PlanIo, FillPredicted) {
  mplan::Plan plan = sample_plan(false);
  plan.pattern.k = 2;
  plan.pattern.period_ms = 8;
  mplan::fill_predicted(plan, 2.5);
  EXPECT_DOUBLE_EQ(plan.predicted.period_ms, 4.0);
  EXPECT_DOUBLE_EQ(plan.predicted.throughput_per_s, 250.0);
  EXPECT_DOUBLE_EQ(plan.predicted.lower_bound_period_ms, 2.5);

  plan = sample_plan(false);
  EXPECT_DOUBLE_EQ(plan.predicted.period_ms, 4.0);
  EXPECT_EQ(plan.predicted.memory_bytes,
            ms::totals(ms::evaluate_memory(plan.stages, plan.pattern, plan.platform)));
  EXPECT_EQ(plan.predicted.memory_bytes, (std::vector<std::int64_t>{1900, 2100}));
}
