#include "cli/planner_options.hpp"

#include "cli/platform_options.hpp"
#include "core/error.hpp"

#include <string>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

po::options_description madpipe::cli::planner_options_description(PlannerSettings& settings,
                                                                  bool gpipe_micro_batches) {
  partition::Discretization& d = settings.discretization;
  po::options_description group("Planner options ([planner] in a --config file)", 100);
  auto add_group = group.add_options();
  if (gpipe_micro_batches)
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
  add_group("scheduler",
            po::value(&settings.scheduler)
                ->value_name("NAME")
                ->default_value(settings.scheduler)
                ->notifier([](const std::string& name) {
                  try {
                    partition::scheduler_from_string(name);
                  } catch (const Error& e) {
                    throw_invalid("", "--scheduler", e.problem());
                  }
                }),
            "how madpipe schedules its allocations: ilp (heuristics, then the stage-level ILP), "
            "heuristic, or auto (ilp when a MILP solver is built)");
  add_group(
      "split-backward",
      po::value(&settings.split_backward)
          ->value_name("MODE")
          ->default_value(settings.split_backward)
          ->notifier([](const std::string& name) {
            try {
              partition::backward_split_from_string(name);
            } catch (const Error& e) {
              throw_invalid("", "--split-backward", e.problem());
            }
          }),
      "where the profile splits backwards into input and weight gradients "
      "(backward_weight_ms): auto (madpipe and contiguous plan with whole backwards, split ones, "
      "and split ones on the first or last half or quarters of the chain only, ilp with and "
      "without the split; the shortest period is kept; zb-h1 and zb-v split) or off (whole "
      "backwards)");
  add_group("solver", po::value(&settings.milp.backend)->value_name("NAME"),
            "MILP solver of the ILPs: cbc or glpk (default: the first built)");
  add_group("time-limit",
            po::value(&settings.time_limit_s)
                ->value_name("SECONDS")
                ->default_value(settings.time_limit_s)
                ->notifier([](double s) {
                  if (!(s > 0)) throw_invalid("", "--time-limit", "must be > 0 seconds");
                }),
            "wall-clock budget of the whole request (the DPs, scheduling, local search and "
            "ILPs, and when nothing fits the search for what would): when it runs out, the best "
            "plan found so far is kept and a note says what was cut");
  add_group("gap",
            po::value(&settings.milp.relative_gap)
                ->value_name("RATIO")
                ->default_value(settings.milp.relative_gap)
                ->notifier([](double g) {
                  if (!(g >= 0 && g < 1)) throw_invalid("", "--gap", "must be in [0, 1)");
                }),
            "relative gap at which an ILP stops (0.01: within 1% of optimal)");
  add_group("solver-threads",
            po::value(&settings.milp.threads)
                ->value_name("N")
                ->default_value(settings.milp.threads)
                ->notifier(at_least(1, "--solver-threads")),
            "threads of the MILP solver");
  add_group("solver-log", po::bool_switch(&settings.milp.log), "print the MILP solver's log");
  add_group("verbose", po::bool_switch(&settings.verbose),
            "print every planning step on stderr (DP runs, allocations scheduled, ILPs) instead "
            "of a status line every second of long requests");
  add_group("write-mps", po::value(&settings.milp.mps_prefix)->value_name("PREFIX"),
            "also write every ILP solved in MPS: PREFIX-schedule-N.mps, PREFIX-full.mps");
  add_group("remat",
            enum_value(settings.remat, partition::kRematStrategyNames, "strategy", "--remat"),
            "per-stage rematerialization: rotor lets a stage that does not fit recompute "
            "activations in its backward (optimal ROTOR sequences), none keeps everything");
  add_group("offload",
            enum_value(settings.offload, partition::kOffloadStrategyNames, "strategy", "--offload"),
            "per-stage offloading: host lets a stage that does not fit copy activations to host "
            "memory during its forward and back for its backward (with recomputation, thesis "
            "ch. 4); needs --host-bandwidth");
  add_group("remat-slots",
            po::value(&settings.remat_slots)
                ->value_name("N")
                ->default_value(settings.remat_slots)
                ->notifier(at_least(10, "--remat-slots")),
            "memory slots of the ROTOR DP per stage (more: finer, slower)");
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

madpipe::partition::PlannerOptions madpipe::cli::to_planner_options(const PlannerSettings& settings,
                                                                    partition::Algorithm algorithm,
                                                                    const Platform& platform) {
  partition::PlannerOptions options;
  options.algorithm = algorithm;
  options.discretization = settings.discretization;
  options.gpipe_micro_batches = settings.gpipe_micro_batches;
  options.max_k = settings.max_k;
  options.scheduler = partition::scheduler_from_string(settings.scheduler);
  options.split_backward = partition::backward_split_from_string(settings.split_backward);
  options.milp = settings.milp;
  options.time_limit_s = settings.time_limit_s;
  options.milp.time_limit_s = settings.time_limit_s;
  options.detailed_progress = settings.verbose;
  options.remat.rotor = settings.remat == partition::RematStrategy::Rotor;
  options.remat.slots = settings.remat_slots;
  options.remat.host_offload = settings.offload == partition::OffloadStrategy::Host;
  if (options.remat.host_offload && !(platform.host_bandwidth_bytes_per_ms > 0))
    throw_invalid("", "--offload", "host needs the host link's speed: give --host-bandwidth");
  options.remat.host_bytes_per_ms = platform.host_bandwidth_bytes_per_ms;
  return options;
}

std::string madpipe::cli::algorithm_names() {
  std::string names;
  for (partition::Algorithm algorithm : partition::all_algorithms())
    names += std::string(names.empty() ? "" : ", ") + partition::to_string(algorithm);
  return names;
}

void madpipe::cli::add_algorithm_option(po::options_description& group,
                                        partition::Algorithm& algorithm, const char* help) {
  group.add_options()(
      "algorithm",
      po::value<std::string>()->value_name("NAME")->default_value("madpipe")->notifier(
          [&algorithm](const std::string& name) {
            algorithm = parse_algorithm(name, "--algorithm");
          }),
      help);
}

madpipe::partition::Algorithm madpipe::cli::parse_algorithm(const std::string& name,
                                                            const std::string& option) {
  try {
    return partition::algorithm_from_string(name);
  } catch (const Error& e) {
    throw_invalid("", option, e.problem());
  }
}
