#pragma once

#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "core/weight_memory.hpp"
#include "partition/planner.hpp"

#include <optional>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe plan --profile F --gpus P --memory M --bandwidth B [options]
struct PlanOptions {
  std::string profile_path;
  PlatformOptions platform;
  PlannerSettings planner;
  partition::Algorithm algorithm = partition::Algorithm::MadPipe;
  std::string output_path;  // empty: no file
  bool quiet = false;       // no progress lines on stderr
  // Either given: the platform's weight copies are what training in this precision with this
  // optimizer holds (weight_memory), not --weight-copies. Unset: fp32, adamw.
  std::optional<Precision> precision;
  std::optional<OptimizerKind> optimizer;
};

po::options_description plan_options_description(PlanOptions& options);
int run_plan(const PlanOptions& options);
// Parses `args` (after "plan") and runs.
int plan_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
