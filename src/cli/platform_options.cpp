#include "cli/platform_options.hpp"

#include "core/error.hpp"
#include "core/units.hpp"

#include <map>
#include <string>
#include <vector>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

std::function<void(int)> madpipe::cli::at_least(int min, const std::string& option) {
  return [min, option](int value) {
    if (value < min) {
      throw_invalid("", option,
                    "must be >= " + std::to_string(min) + ", got " + std::to_string(value));
    }
  };
}

po::options_description madpipe::cli::platform_options_description(
    PlatformOptions& options, const PlatformDefaults* defaults) {
  po::options_description group("Platform options ([platform] in a --config file)", 100);
  auto add_group = group.add_options();
  auto given_or_default = [defaults](auto* value, const std::string& text) {
    if (defaults) return value->default_value(text);
    return value->required();
  };
  po::typed_value<int>* gpus =
      po::value(&options.gpus)->value_name("N")->notifier(at_least(1, "--gpus"));
  if (defaults) {
    options.gpus = defaults->platform.gpus;
    options.weight_copies = defaults->platform.weight_copies;
    gpus->default_value(options.gpus);
  } else {
    gpus->required();
  }
  add_group("gpus", gpus, defaults ? defaults->gpus_help.c_str() : "number of identical GPUs (P)");
  add_group("memory",
            given_or_default(
                po::value<std::string>()->value_name("SIZE")->notifier(
                    [&options](const std::string& text) {
                      options.memory_bytes = parse_bytes(text, "--memory");
                      if (options.memory_bytes <= 0) throw_invalid("", "--memory", "must be > 0");
                    }),
                defaults ? format_bytes(static_cast<double>(defaults->platform.memory_bytes)) : ""),
            "memory of each GPU (M), e.g. 16GiB, 80GB");
  add_group(
      "bandwidth",
      given_or_default(po::value<std::string>()->value_name("RATE")->notifier(
                           [&options](const std::string& text) {
                             options.bandwidth_bytes_per_ms = parse_bandwidth(text, "--bandwidth");
                           }),
                       defaults ? format_bandwidth(defaults->platform.bandwidth_bytes_per_ms) : ""),
      "bandwidth between any two GPUs (beta), e.g. 12GB/s, 100Gbit/s");
  po::typed_value<int>* copies =
      po::value(&options.weight_copies)->value_name("C")->notifier(at_least(1, "--weight-copies"));
  // train counts what its precision, optimizer and mode hold unless told (finish_train_config).
  if (!defaults) copies->default_value(options.weight_copies);
  add_group("weight-copies", copies,
            defaults ? "weight-sized copies per weight (weights, gradients, optimizer state); "
                       "default: what --precision, --optimizer and --mode hold"
                     : "weight-sized copies per weight (weights, gradients, optimizer state); "
                       "madpipe plan --precision and --optimizer count them");
  add_group(
      "host-bandwidth",
      po::value<std::string>()->value_name("RATE")->notifier([&options](const std::string& text) {
        options.host_bandwidth_bytes_per_ms = parse_bandwidth(text, "--host-bandwidth");
      }),
      "bandwidth of copies between a GPU and host memory, for --offload host, e.g. 12GB/s");
  add_group(
      "gpus-per-node",
      po::value(&options.gpus_per_node)->value_name("N")->notifier(at_least(0, "--gpus-per-node")),
      "GPUs per node: GPU g is on node g / N; 0 (default): all GPUs in one node");
  add_group(
      "inter-node-bandwidth",
      po::value<std::string>()->value_name("RATE")->notifier([&options](const std::string& text) {
        options.inter_node_bandwidth_bytes_per_ms = parse_bandwidth(text, "--inter-node-bandwidth");
      }),
      "bandwidth between two GPUs of different nodes, e.g. 25GB/s, 200Gbit/s; "
      "default: --bandwidth");
  return group;
}

madpipe::cli::ConfigSection madpipe::cli::platform_config_section() {
  PlatformOptions unused;
  return ConfigSection{"platform", option_names(platform_options_description(unused))};
}

madpipe::Platform madpipe::cli::to_platform(const PlatformOptions& options) {
  Platform platform;
  platform.gpus = options.gpus;
  platform.memory_bytes = options.memory_bytes;
  platform.bandwidth_bytes_per_ms = options.bandwidth_bytes_per_ms;
  platform.weight_copies = options.weight_copies;
  platform.host_bandwidth_bytes_per_ms = options.host_bandwidth_bytes_per_ms;
  platform.gpus_per_node = options.gpus_per_node;
  platform.inter_node_bandwidth_bytes_per_ms = options.inter_node_bandwidth_bytes_per_ms;
  check_platform_options(platform);
  return platform;
}

void madpipe::cli::check_platform_options(const Platform& platform) {
  static const std::map<std::string, std::string> option_of = {
      {"gpus", "--gpus"},
      {"memory_bytes", "--memory"},
      {"bandwidth_bytes_per_ms", "--bandwidth"},
      {"weight_copies", "--weight-copies"},
      {"host_bandwidth_bytes_per_ms", "--host-bandwidth"},
      {"gpus_per_node", "--gpus-per-node"},
      {"inter_node_bandwidth_bytes_per_ms", "--inter-node-bandwidth"}};
  const std::vector<PlatformProblem> problems = platform_problems(platform);
  if (!problems.empty())
    throw_invalid("", option_of.at(problems.front().field), problems.front().problem);
}

// "in 2 nodes of 4" (the last node may have fewer GPUs), or "" on one node.
static std::string nodes_text(const madpipe::Platform& platform) {
  if (madpipe::num_nodes(platform) < 2) return "";
  return " in " + std::to_string(madpipe::num_nodes(platform)) + " nodes of " +
         std::to_string(platform.gpus_per_node);
}

static std::string links_text(const madpipe::Platform& platform) {
  using madpipe::format_bandwidth;
  if (madpipe::num_nodes(platform) < 2 || madpipe::has_uniform_links(platform))
    return "links at " + format_bandwidth(madpipe::slowest_link_bandwidth(platform));
  return "links at " + format_bandwidth(platform.bandwidth_bytes_per_ms) + " within a node and " +
         format_bandwidth(madpipe::inter_node_bandwidth(platform)) + " between nodes";
}

std::string madpipe::cli::describe(const Platform& platform) {
  return std::to_string(platform.gpus) + (platform.gpus == 1 ? " GPU" : " GPUs") + " with " +
         format_bytes(static_cast<double>(platform.memory_bytes)) + " each" + nodes_text(platform) +
         ", " + links_text(platform) + ", C = " + std::to_string(platform.weight_copies) +
         (platform.host_bandwidth_bytes_per_ms > 0
              ? ", host link at " + format_bandwidth(platform.host_bandwidth_bytes_per_ms)
              : std::string());
}
