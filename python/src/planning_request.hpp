#pragma once

#include "partition/planning_request.hpp"

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::python {

// What the Python package asks the planner for, as the JSON object madpipe/_planning.py builds
// from the keyword arguments of madpipe.plan() (the names are those of the keywords, so errors
// name what the caller wrote):
//   {"platform": {"gpus": 4, "memory_bytes": ..., "bandwidth_bytes_per_ms": ..., ...},
//    "algorithm": "madpipe", "scheduler": "auto", "remat": "none", "offload": "none",
//    "remat_slots": 200, "time_limit": 10 (null: none), "micro_batches": 0, "max_k": 0,
//    "milp_backend": "", "verbose": false}
// Every key but "platform" is a key of partition::set_request_field() (request_key()), which
// reads its value; a key left out or null keeps partition::PlanningRequest's default.
// Throws Error{InvalidInput} naming the keyword of the first problem ("gpus: must be >= 1, got 0").
partition::PlanningRequest planning_request_from_json(const nlohmann::json& request);

// The key of partition::set_request_field() for a keyword of madpipe.plan(): "max_k" -> "max-k",
// "milp_backend" -> "solver".
std::string request_key(const std::string& keyword);

}  // namespace madpipe::python
