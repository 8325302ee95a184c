#pragma once

#include "core/platform.hpp"
#include "partition/planner.hpp"

#include <string>
#include <vector>

namespace madpipe::partition {

// The options of a planning request (`madpipe plan`, `compare`, `sweep`, `scale`, `train`, the
// Python package): PlannerOptions with the --time-limit of the command (kCommandTimeLimitS) for
// the request and its ILPs. The other defaults are PlannerOptions' own.
PlannerOptions request_planner_options();

// What a front end asks the planner for. The platform's defaults are Platform's (C = 3 weight
// copies); `madpipe train` starts from its own platform (runtime::default_train_platform).
struct PlanningRequest {
  Platform platform;
  PlannerOptions options = request_planner_options();
};

// The keys set_request_field() reads, as the command line spells them without "--" and the
// [planner] section of a --config file holds them: "algorithm", "max-k", "remat", ...
const std::vector<std::string>& request_field_keys();

// Sets the option `key` of request_field_keys() from its text ("rotor", "10", "true"), with the
// checks of the command line. Throws Error{InvalidInput} with field `label` (how the caller
// wrote the key: "--max-k", "max_k"), saying what is wrong ("must be >= 0, got -1", "unknown
// strategy 'x' (valid: none, rotor)"); an unknown key is an Error naming the known ones.
void set_request_field(PlannerOptions& options, const std::string& key, const std::string& value,
                       const std::string& label);
inline void set_request_field(PlanningRequest& request, const std::string& key,
                              const std::string& value, const std::string& label) {
  set_request_field(request.options, key, value, label);
}

// The text of the option's current value, as set_request_field() reads it back ("auto", "10",
// "0.0001"); "" for an empty name (--solver, --write-mps).
std::string request_field_text(const PlannerOptions& options, const std::string& key);

// Gives the options what they take from the platform: the host link of offloading. Throws
// Error{InvalidInput} with field `offload_label` when offloading has no host link to use
// ("host needs the host link's speed: give <host_bandwidth_label>").
void attach_platform(PlannerOptions& options, const Platform& platform,
                     const std::string& offload_label, const std::string& host_bandwidth_label);

// The algorithms `madpipe compare` plans by default: all_algorithms() but the full ILP (slow,
// and it needs a MILP solver).
std::vector<Algorithm> compared_algorithms();

// "madpipe, contiguous, ... or ilp": the names of `algorithms`, for help texts.
std::string algorithm_list(const std::vector<Algorithm>& algorithms, const std::string& last_word);

}  // namespace madpipe::partition
