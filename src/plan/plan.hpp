#pragma once

#include "core/platform.hpp"
#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"
#include "schedule/step_order.hpp"

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::plan {

// Where the GPUs' time goes in one period of a plan, as fractions of P x period_ms (they add
// up to 1). `useful` is the profile's compute of the layers; `recomputation` what
// rematerialization adds to it; `imbalance` what the other GPUs lack of the busiest one's
// compute; `tied_exchange` the step's exchange of tied weights spread over its micro-batches;
// `waiting` what the busiest GPU itself idles: transfers and dependencies it waits for.
struct TimeBreakdown {
  double useful = 0;
  double recomputation = 0;
  double imbalance = 0;
  double tied_exchange = 0;
  double waiting = 0;
  std::vector<double> busy;  // per GPU: its compute (recomputation included) / period_ms
};

// One synchronous training step of `micro_batches` (warm-up, steady state and drain), as the
// runtime runs it (simulate's Asap policy): planned where the planner knew the step's
// micro-batches (`madpipe plan --micro-batches`, `madpipe train`).
struct StepPrediction {
  int micro_batches = 0;
  double time_ms = 0;  // first start to last end, plus a tied weight's exchange
  double bubble = 0;   // the GPUs' idle share of P x time_ms
};

struct Predicted {
  // Normalized period: pattern.period_ms / pattern.k, plus tied_exchange_ms /
  // micro_batches_per_step.
  double period_ms = 0;
  double throughput_per_s = 0;  // micro-batches per second: 1000 / period_ms
  double lower_bound_period_ms = 0;
  std::vector<std::int64_t> memory_bytes;  // per GPU, the full estimate (GpuMemory::total)
  // Tied weights on several GPUs: their gradients' exchange once per step (tied_exchange_ms),
  // spread over the step's micro-batches and counted in period_ms. 0 and 0 when none is apart.
  double tied_exchange_ms = 0;
  int micro_batches_per_step = 0;
  // Filled by the planner, which knows the profile (time_breakdown.hpp); absent from plans
  // made by hand.
  std::optional<TimeBreakdown> time;
  std::optional<StepPrediction> step;
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
  // The step of step_order->micro_batches micro-batches in this order on each GPU, where the
  // algorithm publishes one (interleaved, zb-v); otherwise, and for other numbers of
  // micro-batches, the step follows the pattern (simulate.hpp).
  std::optional<schedule::StepOrder> step_order;
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

// Fills plan.predicted from the pattern and the stages (memory from evaluate_memory), a tied
// weight's exchange spread over `micro_batches_per_step` (0: the number of GPUs).
void fill_predicted(Plan& plan, double lower_bound_period_ms, int micro_batches_per_step = 0);

// The normalized period of a pattern on `stages` with the exchange of their tied weights (if any
// lies on several GPUs) spread over `micro_batches_per_step` (0: the platform's GPUs).
double period_with_tied_exchange_ms(const schedule::Pattern& pattern,
                                    const std::vector<schedule::Stage>& stages,
                                    const Platform& platform, int micro_batches_per_step);

}  // namespace madpipe::plan
