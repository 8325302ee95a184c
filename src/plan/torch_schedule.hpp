#pragma once

#include "plan/plan.hpp"

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::plan {

// A plan as torch.distributed.pipelining's _PipelineScheduleRuntime runs it (its "compute_only"
// CSV, which _load_csv reads): for every rank (the plan's GPU) its forwards and backwards of
// micro-batches 0..N-1, in the order of the lowered program (warm-up, steady state and drain, as
// planned). Torch adds the sends and receives itself.
struct TorchSchedule {
  int micro_batches = 0;
  std::vector<int> stage_to_rank;  // the plan's stage s runs on rank stage_to_rank[s]
  std::vector<std::vector<std::string>> actions;  // per rank: "0F3" (stage 0, forward of
                                                  // micro-batch 3), "2B1" (full backward)
};

inline constexpr const char* kTorchStagesFormat = "madpipe.torch-stages/1";

// Throws Error{InvalidInput} when micro_batches < 1.
TorchSchedule torch_schedule(const Plan& plan, int micro_batches);

// One line per rank, actions separated by commas, '\n' after every line; a rank without a stage
// gets an empty line.
std::string torch_schedule_csv(const TorchSchedule& schedule);

// What a torch runtime needs beside the CSV to build its stages (madpipe.torch-stages/1, in
// docs/formats.md): each stage's rank and layers, and notes on where torch will not run the plan
// as madpipe would. Keys in the documented order.
nlohmann::ordered_json torch_stages_json(const Plan& plan, const TorchSchedule& schedule);
// The same as text: one top-level member a line, one stage and one note a line.
std::string torch_stages_text(const Plan& plan, const TorchSchedule& schedule);

// The notes of torch_stages_json: stages that recompute or offload activations, ranks without a
// stage, data-parallel replicas.
std::vector<std::string> torch_schedule_notes(const Plan& plan);

}  // namespace madpipe::plan
