#pragma once

#include "cli/compare_command.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe sweep --profile F --bandwidth B --set memory=4GiB,8GiB --set gpus=2,4 [--algorithms a,b]
//               [--csv FILE] [--svg FILE]
// Every point of the cartesian product of the --set lists is parsed as the compare options
// with each "--KEY=VALUE" added to the command line.
struct SweepOptions : ComparisonOptions {
  std::vector<std::string> sets;  // "memory=4GiB,8GiB", as given (also [sweep] set of --config)
  std::string csv_path;           // empty: no CSV file
  std::string svg_path;           // empty: no plot
  bool quiet = false;
};

po::options_description sweep_options_description(SweepOptions& options);
int sweep_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
