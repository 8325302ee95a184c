#pragma once

#include "core/platform.hpp"
#include "partition/planner.hpp"

#include <nlohmann/json_fwd.hpp>

namespace madpipe::python {

// What the Python package asks the planner for: a platform and the planner's options, as the
// JSON object madpipe/_api.py builds from the keyword arguments of madpipe.plan() (the names are
// those of the keywords, so errors name what the caller wrote):
//   {"platform": {"gpus": 4, "memory_bytes": ..., "bandwidth_bytes_per_ms": ..., ...},
//    "algorithm": "madpipe", "scheduler": "auto", "remat": "none", "offload": "none",
//    "remat_slots": 200, "time_limit": 10 (null: none), "micro_batches": 0, "max_k": 0,
//    "milp_backend": "", "verbose": false}
struct PlanningRequest {
  Platform platform;
  partition::PlannerOptions options;
};

// Throws Error{InvalidInput} naming the keyword of the first problem ("gpus: must be >= 1, got 0").
PlanningRequest planning_request_from_json(const nlohmann::json& request);

}  // namespace madpipe::python
