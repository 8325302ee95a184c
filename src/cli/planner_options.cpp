#include "cli/planner_options.hpp"

#include "core/error.hpp"

#include <string>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

namespace {

using madpipe::partition::PlannerOptions;

// --KEY VALUE_NAME (=its current value), read by partition::set_request_field().
po::typed_value<std::string>* field_value(PlannerOptions& options, const std::string& key,
                                          const char* value_name, bool shows_default = true) {
  po::typed_value<std::string>* value =
      po::value<std::string>()
          ->value_name(value_name)
          ->notifier([&options, key](const std::string& text) {
            madpipe::partition::set_request_field(options, key, text, "--" + key);
          });
  if (shows_default) value->default_value(madpipe::partition::request_field_text(options, key));
  return value;
}

// --KEY without a value: true when given.
po::typed_value<bool>* field_switch(PlannerOptions& options, const std::string& key) {
  return po::bool_switch()->notifier([&options, key](bool on) {
    madpipe::partition::set_request_field(options, key, on ? "true" : "false", "--" + key);
  });
}

void add_pipeline_options(po::options_description& group, PlannerOptions& o,
                          bool micro_batches_option) {
  auto add = group.add_options();
  if (micro_batches_option)
    add("micro-batches", field_value(o, "micro-batches", "N"),
        "micro-batches per training step: plans are compared by the time of that step (warm-up "
        "and drain included) and predict it; also GPipe's step and what the exchange of a tied "
        "weight's gradients is spread over. 0: the steady-state period alone (tied exchange "
        "over the number of GPUs)");
  add("max-k", field_value(o, "max-k", "K"),
      "largest k tried for k-periodic patterns (0: one per pipeline resource, 2S - 1)");
  add("scheduler", field_value(o, "scheduler", "NAME"),
      "how madpipe schedules its allocations: ilp (heuristics, then the stage-level ILP, and "
      "given --micro-batches the step ILP), heuristic, or auto (ilp when a MILP solver is built, "
      "without the step ILP)");
  add("split-backward", field_value(o, "split-backward", "MODE"),
      "where the profile splits backwards into input and weight gradients "
      "(backward_weight_ms): auto (madpipe and contiguous plan with whole backwards, split ones, "
      "and split ones on the first or last half or quarters of the chain only, ilp with and "
      "without the split; the shortest step is kept, or period without --micro-batches; zb-h1 "
      "and zb-v split) or off (whole backwards)");
}

void add_budget_and_solver_options(po::options_description& group, PlannerOptions& o) {
  group.add_options()("solver", field_value(o, "solver", "NAME", false),
                      "MILP solver of the ILPs: cbc or glpk (default: the first built)")(
      "time-limit", field_value(o, "time-limit", "SECONDS"),
      "wall-clock budget of the whole request (the DPs, scheduling, local search and "
      "ILPs, and when nothing fits the search for what would): when it runs out, the best "
      "plan found so far is kept and a note says what was cut")(
      "gap", field_value(o, "gap", "RATIO"),
      "relative gap at which an ILP stops (0.01: within 1% of optimal)")(
      "solver-threads", field_value(o, "solver-threads", "N"), "threads of the MILP solver")(
      "solver-log", field_switch(o, "solver-log"), "print the MILP solver's log")(
      "verbose", field_switch(o, "verbose"),
      "print every planning step on stderr (DP runs, allocations scheduled, ILPs) instead "
      "of a status line every second of long requests")(
      "write-mps", field_value(o, "write-mps", "PREFIX", false),
      "also write every ILP solved in MPS: PREFIX-schedule-N.mps, PREFIX-full.mps");
}

void add_remat_options(po::options_description& group, PlannerOptions& o) {
  group.add_options()("remat", field_value(o, "remat", "NAME"),
                      "per-stage rematerialization: rotor lets a stage that does not fit "
                      "recompute activations in its backward (optimal ROTOR sequences), none "
                      "keeps everything")(
      "offload", field_value(o, "offload", "NAME"),
      "per-stage offloading: host lets a stage that does not fit copy activations to host "
      "memory during its forward and back for its backward (with recomputation, thesis "
      "ch. 4); needs --host-bandwidth")(
      "remat-slots", field_value(o, "remat-slots", "N"),
      "memory slots of the ROTOR DP per stage (more: finer, slower)");
}

void add_discretization_options(po::options_description& group, PlannerOptions& o) {
  group.add_options()("time-steps", field_value(o, "time-steps", "N"),
                      "MadPipe-DP: values of the special GPU's load")(
      "delay-steps", field_value(o, "delay-steps", "N"), "MadPipe-DP: values of the delay")(
      "memory-steps", field_value(o, "memory-steps", "N"),
      "MadPipe-DP: values of the special GPU's memory")(
      "iterations", field_value(o, "iterations", "N"),
      "binary-search iterations on the target period");
}

}  // namespace

po::options_description madpipe::cli::planner_options_description(PlannerSettings& settings,
                                                                  bool micro_batches_option) {
  po::options_description group("Planner options ([planner] in a --config file)", 100);
  add_pipeline_options(group, settings.options, micro_batches_option);
  add_budget_and_solver_options(group, settings.options);
  add_remat_options(group, settings.options);
  add_discretization_options(group, settings.options);
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
  partition::PlannerOptions options = settings.options;
  options.algorithm = algorithm;
  partition::attach_platform(options, platform, "--offload", "--host-bandwidth");
  return options;
}

std::string madpipe::cli::algorithm_names() {
  std::string names;
  for (partition::Algorithm algorithm : partition::all_algorithms())
    names += std::string(names.empty() ? "" : ", ") + partition::to_string(algorithm);
  return names;
}

void madpipe::cli::add_algorithm_option(po::options_description& group,
                                        partition::Algorithm& algorithm, const std::string& help) {
  group.add_options()("algorithm",
                      po::value<std::string>()
                          ->value_name("NAME")
                          ->default_value(partition::to_string(algorithm))
                          ->notifier([&algorithm](const std::string& name) {
                            algorithm = parse_algorithm(name, "--algorithm");
                          }),
                      help.c_str());
}

madpipe::partition::Algorithm madpipe::cli::parse_algorithm(const std::string& name,
                                                            const std::string& option) {
  partition::PlannerOptions options;
  partition::set_request_field(options, "algorithm", name, option);
  return options.algorithm;
}
