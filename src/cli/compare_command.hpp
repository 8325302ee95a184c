#pragma once

#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "partition/planner.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe compare --profile F --gpus P --memory M --bandwidth B [--algorithms a,b] [--csv]
struct CompareOptions {
  std::string profile_path;
  PlatformOptions platform;
  PlannerSettings planner;
  std::vector<partition::Algorithm> algorithms = partition::all_algorithms();
  bool csv = false;
  bool quiet = false;
};

po::options_description compare_options_description(CompareOptions& options);
int run_compare(const CompareOptions& options);
int compare_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
