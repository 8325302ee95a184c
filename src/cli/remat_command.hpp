#pragma once

#include "cli/options.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// madpipe remat --profile FILE --memory SIZE [--first-layer I] [--last-layer J] [--nca N]
//               [--offload host --host-bandwidth RATE]
//               [--graph ops|layers [--max-computations C] [--variant V] [--solver NAME]
//                [--time-limit S]]
struct RematCommandOptions {
  std::string profile_path;
  std::int64_t memory_bytes = 0;  // for the activations of one stage
  int first_layer = 0;
  int last_layer = -1;  // -1: the profile's last layer
  int nca = 1;          // micro-batches in flight (pipelined variant)
  int slots = 500;
  bool offload = false;          // --offload host
  double host_bytes_per_ms = 0;  // --host-bandwidth
  int offload_steps = 50;
  std::string graph;             // --graph ops|layers: Moccasin on the stage's graph; "": ROTOR
  int max_computations = 2;      // --max-computations
  std::string variant = "auto";  // --variant auto|staged|order-free
  std::string solver;            // --solver; "": the first built
  double time_limit_s = 10;      // --time-limit
};

po::options_description remat_options_description(RematCommandOptions& options);
int run_remat(const RematCommandOptions& options);
int remat_command(const std::vector<std::string>& args);

}  // namespace madpipe::cli
