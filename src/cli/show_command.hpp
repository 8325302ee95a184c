#pragma once

#include "cli/options.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe show [--plan FILE] [--trace FILE] [--svg FILE] [--chrome FILE] [--micro-batches N]
//              [--steps S]
struct ShowOptions {
  std::string plan_path;    // empty: no plan
  std::string trace_path;   // empty: no trace
  std::string svg_path;     // empty: no SVG
  std::string chrome_path;  // empty: no Chrome trace
  int micro_batches = 0;    // of the plan's timeline; 0: the timeline's default
  int steps = 2;            // traced steps shown; 0: all
};

po::options_description show_options_description(ShowOptions& options);
int run_show(const ShowOptions& options);
int show_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
