#include "cli/planner_options.hpp"

#include "cli/platform_options.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

po::options_description madpipe::cli::planner_options_description(PlannerSettings& settings) {
  partition::Discretization& d = settings.discretization;
  po::options_description group("Planner options ([planner] in a --config file)", 100);
  auto add_group = group.add_options();
  add_group("micro-batches",
            po::value(&settings.gpipe_micro_batches)
                ->value_name("N")
                ->default_value(0)
                ->notifier(at_least(0, "--micro-batches")),
            "micro-batches per GPipe step (0: the number of GPUs)");
  add_group("max-k",
            po::value(&settings.max_k)
                ->value_name("K")
                ->default_value(0)
                ->notifier(at_least(0, "--max-k")),
            "largest k tried for k-periodic patterns (0: one per pipeline resource, 2S - 1)");
  add_group("time-steps",
            po::value(&d.time_steps)
                ->value_name("N")
                ->default_value(d.time_steps)
                ->notifier(at_least(2, "--time-steps")),
            "MadPipe-DP: values of the special GPU's load");
  add_group("delay-steps",
            po::value(&d.delay_steps)
                ->value_name("N")
                ->default_value(d.delay_steps)
                ->notifier(at_least(2, "--delay-steps")),
            "MadPipe-DP: values of the delay");
  add_group("memory-steps",
            po::value(&d.memory_steps)
                ->value_name("N")
                ->default_value(d.memory_steps)
                ->notifier(at_least(2, "--memory-steps")),
            "MadPipe-DP: values of the special GPU's memory");
  add_group("iterations",
            po::value(&d.iterations)
                ->value_name("N")
                ->default_value(d.iterations)
                ->notifier(at_least(1, "--iterations")),
            "binary-search iterations on the target period");
  return group;
}

madpipe::cli::ConfigSection madpipe::cli::planner_config_section() {
  PlannerSettings unused;
  ConfigSection section{"planner", option_names(planner_options_description(unused))};
  section.keys.push_back("algorithm");
  section.keys.push_back("algorithms");
  return section;
}

madpipe::partition::PlannerOptions madpipe::cli::to_planner_options(
    const PlannerSettings& settings, partition::Algorithm algorithm) {
  partition::PlannerOptions options;
  options.algorithm = algorithm;
  options.discretization = settings.discretization;
  options.gpipe_micro_batches = settings.gpipe_micro_batches;
  options.max_k = settings.max_k;
  return options;
}

std::string madpipe::cli::algorithm_names() {
  std::string names;
  for (partition::Algorithm algorithm : partition::all_algorithms())
    names += std::string(names.empty() ? "" : ", ") + partition::to_string(algorithm);
  return names;
}

madpipe::partition::Algorithm madpipe::cli::parse_algorithm(const std::string& name,
                                                            const std::string& option) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (partition::Algorithm algorithm : partition::all_algorithms())
    if (lower == partition::to_string(algorithm)) return algorithm;
  throw_invalid("", option, "unknown algorithm '" + name + "' (valid: " + algorithm_names() + ")");
}
