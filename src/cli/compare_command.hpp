#pragma once

#include "cli/planner_options.hpp"
#include "cli/platform_options.hpp"
#include "core/profile.hpp"
#include "partition/planner.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// What `compare` and `sweep` plan: a profile on a platform with some algorithms.
struct ComparisonOptions {
  std::string profile_path;
  PlatformOptions platform;
  PlannerSettings planner;
  std::vector<partition::Algorithm> algorithms = partition::all_algorithms();
};

// madpipe compare --profile F --gpus P --memory M --bandwidth B [--algorithms a,b] [--csv]
struct CompareOptions : ComparisonOptions {
  bool csv = false;
  bool quiet = false;
};

// A command's own option group `title`, holding --profile; the command adds its options to it.
po::options_description comparison_group(const std::string& title, ComparisonOptions& options);
// `own` (from comparison_group), then the platform options and the planner options with
// --algorithms: every option of compare or sweep.
po::options_description comparison_options_description(const po::options_description& own,
                                                       ComparisonOptions& options);

po::options_description compare_options_description(CompareOptions& options);
int run_compare(const CompareOptions& options);
int compare_command(const std::vector<std::string>& args);

// One algorithm's plan on one platform, as compare and sweep report it.
struct PlanSummary {
  partition::Algorithm algorithm = partition::Algorithm::MadPipe;
  bool feasible = false;
  double period_ms = 0;  // normalized: per micro-batch
  double throughput_per_s = 0;
  std::int64_t max_memory_bytes = 0;  // of the GPU that needs the most
  double planning_seconds = 0;
  int stages = 0;
  int k = 0;             // micro-batches per period of the pattern
  int remat_stages = 0;  // stages that rematerialize or offload
  int split_stages = 0;  // stages that split their backward (W apart from B)
  bool cut_by_time_limit = false;
};

// Plans with `options` (the validator checks every plan: an invalid one is an internal error)
// and summarizes the result.
PlanSummary plan_summary(const Profile& profile, const Platform& platform,
                         const partition::PlannerOptions& options);

// The summary of a plan make_plan() returned for `algorithm`.
PlanSummary summarize(partition::Algorithm algorithm, const partition::PlanResult& result);

// The end of a progress line: "19.17 ms per micro-batch (0.15 s)" or "does not fit (0.00 s)".
std::string describe_outcome(const PlanSummary& summary);

}  // namespace madpipe::cli
