#pragma once

#include "cli/options.hpp"

#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe memplan --profile FILE --first L --last L [--remat-sequence TEXT]
//                 | --profile FILE --plan FILE --stage S
//                 [--in-flight N] [--solver NAME] [--time-limit S]
//                 [--order given|ilp] [--pyramid] [--steady-state [--periods N]]
struct MemplanOptions {
  std::string profile_path;
  int first_layer = -1;
  int last_layer = -1;
  std::string sequence;  // remat_sequence.hpp text; empty: store everything
  std::string plan_path;
  int stage = -1;
  int in_flight = 0;  // 0: the stage's NCA with --plan, else 1
  std::string solver;
  double time_limit_s = 10;     // per ILP solved
  std::string order = "given";  // "ilp": reorder ops with the operator-order ILP first
  bool pyramid = false;         // pre-place the pyramid before the address ILP
  bool steady_state = false;    // modulo plan of the periodic steady state
  int periods = 0;              // with steady_state: periods on the circle; 0: the fewest
};

po::options_description memplan_options_description(MemplanOptions& options);
int run_memplan(const MemplanOptions& options);
int memplan_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
