#pragma once

#include "cli/options.hpp"
#include "partition/planner.hpp"
#include "partition/planning_request.hpp"

#include <string>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// Planner tuning shared by `plan`, `compare`, `sweep`, `scale` and `train`; section [planner] of
// a --config file. Every value goes through partition::set_request_field(), whose defaults the
// help shows.
struct PlannerSettings {
  partition::PlannerOptions options = partition::request_planner_options();
};

// With `micro_batches_option` false, no --micro-batches: `train` has its own, which is also
// the planner's step size.
po::options_description planner_options_description(PlannerSettings& settings,
                                                    bool micro_batches_option = true);
// Includes "algorithm" (plan) and "algorithms" (compare).
ConfigSection planner_config_section();
// `platform` gives the host bandwidth of --offload host; an error names the missing option.
partition::PlannerOptions to_planner_options(const PlannerSettings& settings,
                                             partition::Algorithm algorithm,
                                             const Platform& platform);

// Adds --algorithm NAME (default madpipe) to `group`, parsed into `algorithm`.
void add_algorithm_option(po::options_description& group, partition::Algorithm& algorithm,
                          const std::string& help);

// Parses an algorithm name for the option `option`; the error lists the valid names.
partition::Algorithm parse_algorithm(const std::string& name, const std::string& option);
// "madpipe, contiguous, 1f1b, gpipe"
std::string algorithm_names();

}  // namespace madpipe::cli
