#pragma once

#include "cli/options.hpp"
#include "plan/simulate.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe simulate --plan FILE --profile FILE [--micro-batches N] [--policy timetable|asap]
struct SimulateOptions {
  std::string plan_path;
  std::string profile_path;
  int micro_batches = 0;  // 0: the simulator's default
  plan::StartPolicy policy = plan::StartPolicy::Timetable;
};

po::options_description simulate_options_description(SimulateOptions& options);
int run_simulate(const SimulateOptions& options);
int simulate_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
