#pragma once

#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "partition/planner.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe scale --profile F --gpus G --global-batch B --memory M --bandwidth X [options]
// Every split of the G GPUs into D data-parallel replicas of a P-GPU pipeline, with its modelled
// throughput; the best one is chosen.
struct ScaleOptions {
  std::string profile_path;
  PlatformOptions platform;  // all G GPUs
  // Many pipelines to plan: the heuristic scheduler unless --scheduler asks for the ILP.
  PlannerSettings planner = [] {
    PlannerSettings settings;
    settings.options.scheduler = partition::Scheduler::Heuristic;
    return settings;
  }();
  partition::Algorithm algorithm = partition::Algorithm::MadPipe;
  int global_batch = 0;                 // samples per step over all replicas
  double all_reduce_latency_ms = 0.01;  // per message of a ring all-reduce
  std::string csv_path;                 // empty: no CSV file
  std::string output_path;              // empty: no plan file
  bool quiet = false;
};

po::options_description scale_options_description(ScaleOptions& options);
int run_scale(const ScaleOptions& options);
// Parses `args` (after "scale") and runs.
int scale_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
