#pragma once

#include "cli/options.hpp"
#include "partition/planner.hpp"
#include "partition/stage_options.hpp"

#include <string>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// Planner tuning shared by `plan` and `compare`; section [planner] of a --config file.
struct PlannerSettings {
  partition::Discretization discretization{};
  int gpipe_micro_batches = 0;  // --micro-batches: GPipe step size; 0: number of GPUs
  int max_k = 0;                // 0: number of GPUs
  std::string scheduler = "auto";
  std::string split_backward = "auto";
  partition::MilpSettings milp{};
  double time_limit_s = partition::kCommandTimeLimitS;  // --time-limit: the whole request
  bool verbose = false;                                 // --verbose: every planning step on stderr
  partition::RematStrategy remat = partition::RematStrategy::None;
  partition::OffloadStrategy offload = partition::OffloadStrategy::None;
  int remat_slots = 200;
};

// With `gpipe_micro_batches` false, no --micro-batches: `train` has its own, which is also
// GPipe's step size.
po::options_description planner_options_description(PlannerSettings& settings,
                                                    bool gpipe_micro_batches = true);
// Includes "algorithm" (plan) and "algorithms" (compare).
ConfigSection planner_config_section();
// `platform` gives the host bandwidth of --offload host; an error names the missing option.
partition::PlannerOptions to_planner_options(const PlannerSettings& settings,
                                             partition::Algorithm algorithm,
                                             const Platform& platform);

// Adds --algorithm NAME (default madpipe) to `group`, parsed into `algorithm`.
void add_algorithm_option(po::options_description& group, partition::Algorithm& algorithm,
                          const char* help);

// Parses an algorithm name for the option `option`; the error lists the valid names.
partition::Algorithm parse_algorithm(const std::string& name, const std::string& option);
// "madpipe, contiguous, 1f1b, gpipe"
std::string algorithm_names();

}  // namespace madpipe::cli
