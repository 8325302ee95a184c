#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::plan {

struct Predicted {
  double period_ms = 0;         // normalized period: pattern.period_ms / pattern.k
  double throughput_per_s = 0;  // micro-batches per second: 1000 / period_ms
  double lower_bound_period_ms = 0;
  std::vector<std::int64_t> memory_bytes;  // per GPU, the full estimate (GpuMemory::total)
};

struct SolverInfo {
  std::string backend;
  std::string status;  // optimal, feasible, infeasible, timeout, error
  double objective = 0;
  double bound = 0;
  double gap = 0;
  double seconds = 0;
};

struct Plan {
  std::string profile;  // profile name
  Platform platform;    // the GPUs of one pipeline
  // Data-parallel replicas of the pipeline: D * platform.gpus ranks, rank r runs pipeline
  // position r % platform.gpus of replica r / platform.gpus.
  int replicas = 1;
  std::string algorithm;
  std::vector<schedule::Stage> stages;
  schedule::Pattern pattern;
  Predicted predicted;
  std::optional<SolverInfo> solver;
};

inline constexpr const char* kPlanFormat = "madpipe.plan/1";

// JSON I/O of madpipe.plan/1, keys in a fixed order so that output is byte-identical run to run.
nlohmann::json plan_to_json(const Plan& plan);
Plan plan_from_json(const nlohmann::json& j, const std::string& file = "");
void write_plan(const Plan& plan, std::ostream& out);
void write_plan(const Plan& plan, const std::string& path);  // atomic: temporary file + rename
Plan read_plan(const std::string& path);

// Fills plan.predicted from the pattern and the stages (memory from evaluate_memory).
void fill_predicted(Plan& plan, double lower_bound_period_ms);

}  // namespace madpipe::plan
