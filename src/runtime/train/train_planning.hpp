#pragma once

#include "core/platform.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"
#include "plan/plan.hpp"
#include "runtime/config/train_config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"

#include <functional>
#include <string>

#include <torch/torch.h>

namespace madpipe::runtime {

// What `madpipe train` plans with and how its ranks agree on a profile and a plan.

using Say = std::function<void(const std::string&)>;  // a progress line (rank 0 prints it)

std::string plan_text(const plan::Plan& plan);  // the plan file's JSON

// The platform of one replica's pipeline (partition::replica_platform: its own nodes when the
// replicas sit alike on them, else every link at the slowest bandwidth).
Platform platform_of(const PlanningSettings& c);

// Collective: rank 0 plans (or reads --plan, which must match the run's ranks, replicas and
// model) and every rank gets the same plan, with the run's replicas.
plan::Plan agree_on_plan(const TrainConfig& c, const Profile& profile, int rank, const Say& say);

// Collective: every rank measures the model at once, under the run's own sharing of cores or
// GPUs, and the profile keeps each layer's mean time over the ranks (or rank 0 reads --profile);
// every rank gets the same profile, which rank 0 also writes to <output_dir>/profile.json.
// `cpu_sharing` (when not null): what the profile's CPU times were scaled by for the ranks'
// sharing of cores (1 on a GPU or with --profile), for measurements taken later to compare.
Profile agree_on_profile(const TrainConfig& c, ChainModel& model, const Batch& sample,
                         const torch::Device& device, int rank, const Say& say,
                         double* cpu_sharing = nullptr);

// "  stage s: layers A..B on rank r" lines.
std::string stage_summary(const plan::Plan& plan, const ChainModel& model);

}  // namespace madpipe::runtime
