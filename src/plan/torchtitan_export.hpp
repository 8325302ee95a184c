#pragma once

#include "core/profile.hpp"
#include "plan/plan.hpp"
#include "plan/torch_schedule.hpp"

#include <string>
#include <vector>

namespace madpipe::plan {

// A plan as torchtitan runs it: torchtitan builds its pipeline from `module_fqns_per_model_part`
// (the module names of each stage) and places stage s on pipeline rank s % P ("loop" placement,
// the one its CSV schedules use), then runs the compute-only CSV of
// `pipeline_parallel_schedule_csv` in a _PipelineScheduleRuntime.
struct TorchtitanExport {
  TorchSchedule schedule;                       // its rows in torchtitan's rank order
  std::vector<int> rank_of_gpu;                 // torchtitan's pipeline rank of the plan's GPU g
  std::vector<std::vector<std::string>> parts;  // module names of each stage
};

// torchtitan's pipeline rank of each of the plan's GPUs: GPU g holds the stages s with
// s % P == rank. Throws as torchtitan_export does when there is none.
std::vector<int> torchtitan_ranks(const Plan& plan);

// The export of `plan` for `micro_batches` micro-batches, `module_names[l]` the torchtitan
// module names of layer l of the chain. The plan's GPUs are renumbered so that stage s is on rank
// s % P; throws Error{Unsupported} when no renumbering gives that (a rank holding stages of two
// residues, a number of stages that P does not divide, or, on a multi-node platform, any
// renumbering at all: it would move stages between nodes), naming the stages at fault, and
// Error{InvalidInput} when module_names does not have one entry per layer.
TorchtitanExport torchtitan_export(const Plan& plan, int micro_batches,
                                   const std::vector<std::vector<std::string>>& module_names);

// torchtitan's module names for a decoder profile of madpipe's (`madpipe profile --analytic`,
// the built-in gpt): embed -> tok_embeddings, block<i> -> layers.<i>, head -> norm, output.
// Throws Error{InvalidInput} naming `file` (the profile's) and the first layer of another name.
std::vector<std::vector<std::string>> decoder_module_names(const Profile& profile,
                                                           const std::string& file);

// The TOML lines of torchtitan's [parallelism] (and [training] when micro_batch_size > 0) that
// run the export, its CSV at `csv_path`.
std::string torchtitan_toml(const TorchtitanExport& exported, const std::string& csv_path,
                            int micro_batch_size);

}  // namespace madpipe::plan
