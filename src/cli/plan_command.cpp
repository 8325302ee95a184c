#include "cli/plan_command.hpp"

#include "cli/options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/plan_or_explain.hpp"
#include "partition/planner.hpp"
#include "partition/planning_request.hpp"
#include "plan/plan.hpp"
#include "plan/step.hpp"
#include "plan/time_breakdown.hpp"
#include "schedule/memory.hpp"
#include "schedule/shared_weights.hpp"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "plan", "--profile FILE --gpus N --memory SIZE --bandwidth RATE [options]",
    "Partitions the profiled chain into stages, places them on the GPUs and computes a periodic\n"
    "schedule that fits in memory; prints a summary and writes the plan with --output."};

po::options_description madpipe::cli::plan_options_description(PlanOptions& options) {
  po::options_description plan("Plan options", 100);
  auto add_plan = plan.add_options();
  add_plan("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
           "madpipe.profile/1 JSON file of the model's layers");
  add_plan("output,o", po::value(&options.output_path)->value_name("FILE"),
           "write the plan (madpipe.plan/1 JSON) to FILE");
  add_plan("quiet,q", po::bool_switch(&options.quiet), "no progress lines on stderr");
  add_plan("precision",
           optional_enum_value(options.precision, kPrecisionNames, "precision", "--precision"),
           "the precision training runs in (fp32, bf16, fp16; as madpipe train --precision): "
           "with --optimizer, sets the weight copies C to the bytes it holds per parameter");
  add_plan("optimizer",
           optional_enum_value(options.optimizer, kOptimizerNames, "optimizer", "--optimizer"),
           "the optimizer training runs (adamw, sgd with momentum): with --precision, sets the "
           "weight copies C (instead of --weight-copies)");
  po::options_description planner = planner_options_description(options.planner);
  // all_algorithms() ends with ilp.
  add_algorithm_option(planner, options.algorithm,
                       partition::algorithm_list(partition::all_algorithms(), "or") +
                           " (the full ILP, needs a MILP solver)");
  po::options_description all(100);
  all.add(plan).add(platform_options_description(options.platform)).add(planner);
  return all;
}

static std::string layer_range(int first, int last) {
  return first == last ? std::to_string(first)
                       : std::to_string(first) + ".." + std::to_string(last);
}

static std::string layer_names(const madpipe::Profile& profile, int first, int last) {
  const auto name = [&](int l) { return profile.layers[static_cast<std::size_t>(l)].name; };
  return first == last ? name(first) : name(first) + ".." + name(last);
}

static std::string bytes(std::int64_t value) {
  return madpipe::format_bytes(static_cast<double>(value));
}

static std::string stages_of_gpu(const std::vector<madpipe::schedule::Stage>& stages, int gpu) {
  std::string list;
  for (const auto& stage : stages)
    if (stage.gpu == gpu) list += (list.empty() ? "" : ",") + std::to_string(stage.id);
  return list.empty() ? "-" : list;
}

// Where each tied weight lies: on one GPU (held once), or on several that exchange its gradients
// once per step.
static void print_tied_weights(const madpipe::plan::Plan& plan, const madpipe::Profile& profile) {
  using namespace madpipe;
  for (const schedule::SharedWeightPlacement& placement :
       schedule::shared_weight_placements(plan.stages)) {
    std::string layers = "group " + std::to_string(placement.group);
    if (placement.group >= 0 && placement.group < static_cast<int>(profile.tied_weights.size())) {
      layers.clear();
      for (int layer : profile.tied_weights[static_cast<std::size_t>(placement.group)].layers)
        layers +=
            (layers.empty() ? "" : ", ") + profile.layers[static_cast<std::size_t>(layer)].name;
    }
    std::string gpus;
    for (int gpu : placement.gpus) gpus += (gpus.empty() ? "" : ", ") + std::to_string(gpu);
    std::cout << "tied weight  " << bytes(placement.bytes) << " (" << layers << ")";
    if (placement.gpus.size() == 1) {
      std::cout << " on gpu " << gpus << ", held once\n";
      continue;
    }
    std::cout << " on gpus " << gpus << ": its gradients summed once per step\n";
  }
  if (plan.predicted.tied_exchange_ms > 0)
    std::cout << "exchange     " << format_ms(plan.predicted.tied_exchange_ms)
              << " per step for the tied weights, over " << plan.predicted.micro_batches_per_step
              << " micro-batches per step (--micro-batches): "
              << format_ms(plan.predicted.tied_exchange_ms / plan.predicted.micro_batches_per_step)
              << " per micro-batch, in the period\n";
}

// On several nodes: the stage boundaries whose transfers cross nodes, one line each.
static void print_node_crossings(const madpipe::plan::Plan& plan) {
  using namespace madpipe;
  if (num_nodes(plan.platform) < 2) return;
  const std::string label = "across nodes ";
  int printed = 0;
  for (std::size_t s = 0; s + 1 < plan.stages.size(); ++s) {
    const schedule::Stage& from = plan.stages[s];
    const int to = plan.stages[s + 1].gpu;
    if (node_of(plan.platform, from.gpu) == node_of(plan.platform, to)) continue;
    std::cout << (printed++ == 0 ? label : std::string(label.size(), ' ')) << "stages " << s
              << " -> " << s + 1 << ": gpu " << from.gpu << " (node "
              << node_of(plan.platform, from.gpu) << ") -> gpu " << to << " (node "
              << node_of(plan.platform, to) << "), " << bytes(from.output_bytes) << ", "
              << format_ms(schedule::transfer_ms(from.output_bytes, plan.platform, from.gpu, to))
              << " per transfer\n";
  }
  if (printed == 0) std::cout << label << "none: every stage boundary stays inside a node\n";
}

// `weights`: what --precision and --optimizer hold per parameter (empty: not given).
static void print_summary(const madpipe::plan::Plan& plan, const madpipe::Profile& profile,
                          const std::string& weights, double planning_seconds) {
  using namespace madpipe;
  using cli::Align;
  const schedule::Pattern& pattern = plan.pattern;
  const int num_stages = static_cast<int>(plan.stages.size());
  std::cout << "profile      " << profile.name << " (" << profile.layers.size() << " layers"
            << (profile.device.empty() ? "" : ", measured on " + profile.device) << ")\n"
            << "platform     " << cli::describe(plan.platform) << '\n'
            << (weights.empty() ? "" : "weights      " + weights + "\n") << "algorithm    "
            << plan.algorithm << ": " << num_stages << " stages, "
            << (schedule::is_contiguous_allocation(plan.stages) ? "contiguous" : "non-contiguous")
            << " allocation, " << pattern.k << "-periodic pattern\n\n";

  const std::vector<int> in_flight = schedule::concurrent_activations(pattern, num_stages);
  cli::Table stages{{{"stage"},
                     {"layers", Align::Left},
                     {"names", Align::Left},
                     {"gpu"},
                     {"F ms"},
                     {"B ms"},
                     {"weights"},
                     {"stored"},
                     {"in flight"}},
                    {}};
  // Only plans where some stage splits its backward get the column: the part of B that W runs.
  const bool splits = std::any_of(plan.stages.begin(), plan.stages.end(),
                                  [](const schedule::Stage& s) { return s.splits_backward(); });
  if (splits) stages.columns.insert(stages.columns.begin() + 6, {"of which W"});
  // Only plans where some stage rematerializes or offloads get the column.
  const bool saves = std::any_of(plan.stages.begin(), plan.stages.end(),
                                 [](const schedule::Stage& s) { return s.uses_sequence(); });
  if (saves) stages.columns.push_back({"saves memory by", Align::Left});
  for (const schedule::Stage& stage : plan.stages) {
    stages.rows.push_back(
        {std::to_string(stage.id), layer_range(stage.first_layer, stage.last_layer),
         layer_names(profile, stage.first_layer, stage.last_layer), std::to_string(stage.gpu),
         cli::fixed(stage.forward_ms, 2), cli::fixed(stage.backward_ms, 2),
         bytes(stage.weight_bytes), bytes(stage.stored_bytes),
         std::to_string(in_flight[static_cast<std::size_t>(stage.id)])});
    if (splits)
      stages.rows.back().insert(
          stages.rows.back().begin() + 6,
          stage.splits_backward() ? cli::fixed(stage.backward_weight_ms, 2) : std::string("-"));
    if (!saves) continue;
    const bool recomputes = stage.remat != schedule::RematStrategy::None,
               offloads = stage.offload != schedule::OffloadStrategy::None;
    stages.rows.back().push_back(recomputes && offloads ? "recomputing, offloading"
                                 : recomputes           ? "recomputing"
                                 : offloads             ? "offloading"
                                                        : "-");
  }
  cli::print_table(stages, std::cout);
  print_node_crossings(plan);

  const plan::Predicted& predicted = plan.predicted;
  std::cout << "\nperiod       " << format_ms(predicted.period_ms) << " per micro-batch";
  if (pattern.k > 1) {
    std::cout << " (pattern period " << format_ms(pattern.period_ms) << " for k = " << pattern.k
              << " micro-batches)";
  }
  std::cout << "\nthroughput   " << cli::fixed(predicted.throughput_per_s, 2)
            << " micro-batches/s\n"
            << "lower bound  " << format_ms(predicted.lower_bound_period_ms) << " per micro-batch";
  // Which bound it is: the compute alone, or the activations memory leaves room for.
  const double compute_bound = partition::lower_bound_period_ms(profile, plan.platform);
  if (predicted.lower_bound_period_ms > compute_bound * (1 + 1e-9))
    std::cout << " (memory: micro-batches in flight; compute alone " << format_ms(compute_bound)
              << ")";
  std::cout << "; period / lower bound = "
            << cli::fixed(predicted.period_ms / predicted.lower_bound_period_ms, 3) << "\n";
  if (predicted.step) {
    const plan::StepPrediction& step = *predicted.step;
    const double bound = plan::step_lower_bound_ms(plan, step.micro_batches);
    std::cout << "step         " << format_ms(step.time_ms) << " for " << step.micro_batches
              << " micro-batch" << (step.micro_batches == 1 ? "" : "es") << " (warm-up and drain "
              << "included), " << cli::fixed(100 * step.bubble, 1) << "% bubble; lower bound "
              << format_ms(bound)
              << ", step / lower bound = " << cli::fixed(bound > 0 ? step.time_ms / bound : 0, 3)
              << "\n";
    if (plan.step_order)
      std::cout << "             each GPU in the order of the plan's step_order (a published "
                   "schedule's or the step ILP's)\n";
  }
  const plan::TimeBreakdown time =
      predicted.time ? *predicted.time : plan::time_breakdown(plan, profile);
  if (!time.busy.empty()) {
    const auto [least, most] = std::minmax_element(time.busy.begin(), time.busy.end());
    auto percent = [](double fraction) { return cli::fixed(100 * fraction, 1) + "%"; };
    std::cout << "time         " << percent(time.useful) << " useful compute, "
              << percent(time.recomputation) << " recomputation, " << percent(time.imbalance)
              << " imbalance, ";
    if (time.tied_exchange > 0) std::cout << percent(time.tied_exchange) << " tied exchange, ";
    std::cout << percent(time.waiting) << " waiting for transfers and dependencies (GPUs busy "
              << percent(*least) << " to " << percent(*most) << " of the period)\n";
  }
  print_tied_weights(plan, profile);
  std::cout << '\n';

  const std::vector<schedule::GpuMemory> memory =
      schedule::evaluate_memory(plan.stages, pattern, plan.platform);
  const double limit = static_cast<double>(plan.platform.memory_bytes);
  cli::Table gpus{{{"gpu"},
                   {"stages", Align::Left},
                   {"memory"},
                   {"of limit"},
                   {"weights"},
                   {"activations"},
                   {"buffers"},
                   {"workspace"}},
                  {}};
  for (int g = 0; g < plan.platform.gpus; ++g) {
    const auto index = static_cast<std::size_t>(g);
    const std::int64_t total = predicted.memory_bytes[index];
    gpus.rows.push_back({std::to_string(g), stages_of_gpu(plan.stages, g), bytes(total),
                         cli::fixed(100.0 * static_cast<double>(total) / limit, 0) + "%",
                         bytes(memory[index].weights), bytes(memory[index].activations),
                         bytes(memory[index].buffers), bytes(memory[index].workspace)});
  }
  cli::print_table(gpus, std::cout);
  std::cout << "memory limit " << bytes(plan.platform.memory_bytes) << " per GPU\n"
            << "planned in   " << cli::fixed(planning_seconds, 2) << " s\n";
}

// --precision, --optimizer: C from what training holds per parameter, in units of the profile's
// weights, which must have been measured in that precision.
static std::string count_weight_copies(const madpipe::cli::PlanOptions& options,
                                       const madpipe::Profile& profile,
                                       madpipe::cli::PlatformOptions& platform) {
  using namespace madpipe;
  if (!options.precision && !options.optimizer) return "";
  const Precision precision = options.precision.value_or(Precision::Fp32);
  const OptimizerKind optimizer = options.optimizer.value_or(OptimizerKind::AdamW);
  const std::string measured = profile.dtype.empty() ? "float32" : profile.dtype;
  if (measured != compute_dtype_name(precision))
    throw Error(ErrorKind::InvalidInput, options.profile_path, "/dtype",
                "the profile was measured in " + measured + " but --precision " +
                    name_of(kPrecisionNames, precision) + " trains in " +
                    compute_dtype_name(precision) + ": profile with madpipe profile --precision " +
                    name_of(kPrecisionNames, precision));
  const WeightMemory memory = weight_memory(precision, optimizer);
  platform.weight_copies = memory.copies;
  return std::to_string(memory.bytes_per_parameter) + " bytes per parameter (" + memory.breakdown +
         "; " + name_of(kPrecisionNames, precision) + " " + name_of(kOptimizerNames, optimizer) +
         "): C = " + std::to_string(memory.copies) + " copies of the " +
         compute_dtype_name(precision) + " weights";
}

// Where memory, not compute, sets the period of a plan whose stages keep every activation (the
// memory-aware bound above the compute bound, and the period well above the compute bound), says
// so and names what could shorten it.
static void print_memory_binds_note(const madpipe::plan::Plan& plan,
                                    const madpipe::Profile& profile,
                                    const madpipe::partition::PlannerOptions& planner) {
  using namespace madpipe;
  constexpr double kWellAbove = 1.5;
  if (plan.predicted.period_ms <= 0) return;
  for (const schedule::Stage& stage : plan.stages)
    if (stage.remat != schedule::RematStrategy::None ||
        stage.offload != schedule::OffloadStrategy::None)
      return;
  const double compute_bound = partition::lower_bound_period_ms(profile, plan.platform);
  const double bound = plan.predicted.lower_bound_period_ms;
  if (bound <= compute_bound * (1 + 1e-9) || plan.predicted.period_ms < kWellAbove * compute_bound)
    return;
  // What was not asked for may help; what was asked for did not find a shorter plan in time.
  std::vector<std::string> untried;
  if (planner.remat.remat == partition::RematStrategy::None)
    untried.push_back("--remat rotor (recompute activations in the backward)");
  if (planner.remat.offload == partition::OffloadStrategy::None)
    untried.push_back("--offload host");
  std::cout << "note         memory sets this period: no plan that keeps every activation beats "
            << format_ms(bound) << " per micro-batch, where compute alone allows "
            << format_ms(compute_bound);
  if (untried.empty())
    std::cout << "; no stage rematerializes or offloads: a longer --time-limit may find a plan "
                 "that does\n";
  else
    std::cout << "; " << untried.front()
              << (untried.size() > 1 ? " or " + untried.back() : std::string())
              << " may plan a shorter one\n";
}

int madpipe::cli::run_plan(const PlanOptions& options) {
  const Profile profile = read_profile(options.profile_path);
  PlatformOptions platform_options = options.platform;
  const std::string weights = count_weight_copies(options, profile, platform_options);
  const Platform platform = to_platform(platform_options);
  partition::PlannerOptions planner =
      to_planner_options(options.planner, options.algorithm, platform);
  if (!options.quiet)
    planner.progress = [](const std::string& line) { std::cerr << "plan: " << line << '\n'; };
  // No plan fits: the error gives the smallest memory per GPU that would.
  partition::Explaining explaining;
  if (!options.quiet)
    explaining.announce = [](const std::string& reason) {
      std::cerr << "plan: " << reason << "; searching for what would fit\n";
    };
  const partition::PlanResult result =
      partition::plan_or_explain(profile, platform, planner, explaining);
  print_summary(result.plan, profile, weights, result.planning_seconds);
  if (result.plan.solver) {
    const plan::SolverInfo& solver = *result.plan.solver;
    std::cout << "solver       " << solver.backend << ", " << solver.status << " in "
              << cli::fixed(solver.seconds, 2) << " s, objective " << format_ms(solver.objective)
              << ", bound " << format_ms(solver.bound) << ", gap "
              << cli::fixed(100 * solver.gap, 2) << "%\n";
  }
  for (const std::string& note : result.notes) std::cout << "note         " << note << '\n';
  print_memory_binds_note(result.plan, profile, planner);
  if (!options.output_path.empty()) {
    plan::write_plan(result.plan, options.output_path);
    std::cout << "plan written to " << options.output_path << '\n';
  }
  return 0;
}

int madpipe::cli::plan_command(const std::vector<std::string>& args) {
  PlanOptions options;
  const po::options_description description = plan_options_description(options);
  po::variables_map parsed;
  if (!parse_options(args, kSyntax, description,
                     {platform_config_section(), planner_config_section()}, &parsed)) {
    return 0;
  }
  if ((options.precision || options.optimizer) && given(parsed, "weight-copies"))
    throw_invalid("", "--weight-copies",
                  "give either --weight-copies or --precision and --optimizer (which count the "
                  "copies training holds), not both");
  return run_plan(options);
}
