#pragma once

#include "cli/options.hpp"
#include "core/platform.hpp"

#include <cstdint>
#include <functional>
#include <string>

#include <boost/program_options/options_description.hpp>

namespace madpipe::cli {

// --gpus, --memory, --bandwidth, --weight-copies, --host-bandwidth, --gpus-per-node,
// --inter-node-bandwidth; section [platform] of a --config file.
struct PlatformOptions {
  int gpus = 0;
  std::int64_t memory_bytes = 0;      // from "16GiB"-style text
  double bandwidth_bytes_per_ms = 0;  // from "12GB/s"-style text
  int weight_copies = 3;
  double host_bandwidth_bytes_per_ms = 0;        // --host-bandwidth: GPU <-> host copies; 0: none
  int gpus_per_node = 0;                         // --gpus-per-node; 0: all GPUs in one node
  double inter_node_bandwidth_bytes_per_ms = 0;  // --inter-node-bandwidth; 0: --bandwidth
};

// For a command with a platform to fall back on (`train`): --gpus, --memory, --bandwidth and
// --weight-copies default to it instead of being required.
struct PlatformDefaults {
  Platform platform;
  std::string gpus_help;  // what --gpus counts
};

po::options_description platform_options_description(PlatformOptions& options,
                                                     const PlatformDefaults* defaults = nullptr);
ConfigSection platform_config_section();
// The platform of the options; throws Error{InvalidInput} naming the option of its first problem
// (check_platform_options).
Platform to_platform(const PlatformOptions& options);

// Throws Error{InvalidInput} for the first of platform_problems(platform), naming its option
// ("--gpus: must be at most 4096, got 5000").
void check_platform_options(const Platform& platform);

// "4 GPUs with 8.0 GiB each, links at 12.0 GB/s, C = 3"; on several nodes
// "8 GPUs with 16.0 GiB each in 2 nodes of 4, links at 100.0 GB/s within a node and 12.0 GB/s
// between nodes, C = 3"
std::string describe(const Platform& platform);

// Notifier that rejects an integer option below `min`, naming the option ("--gpus").
std::function<void(int)> at_least(int min, const std::string& option);

}  // namespace madpipe::cli
