#include "cli/simulate_command.hpp"

#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "plan/plan.hpp"
#include "plan/validate.hpp"

#include <algorithm>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "simulate", "--plan FILE --profile FILE [options]",
    "Checks a plan against its profile, then replays one training step of N micro-batches\n"
    "(warm-up and drain included) and reports the step time, the steady-state period and the\n"
    "peak memory of every GPU next to the plan's predictions."};

namespace {
struct PolicyName {
  madpipe::plan::StartPolicy policy;
  const char* name;
};
}  // namespace

static constexpr PolicyName kPolicyNames[] = {
    {madpipe::plan::StartPolicy::Timetable, "timetable"},
    {madpipe::plan::StartPolicy::Asap, "asap"},
};

static const char* policy_name(madpipe::plan::StartPolicy policy) {
  for (const PolicyName& entry : kPolicyNames)
    if (entry.policy == policy) return entry.name;
  MADPIPE_UNREACHABLE("unknown start policy");
}

static madpipe::plan::StartPolicy parse_policy(const std::string& name) {
  for (const PolicyName& entry : kPolicyNames)
    if (name == entry.name) return entry.policy;
  madpipe::throw_invalid("", "--policy", "unknown policy '" + name + "' (valid: timetable, asap)");
}

po::options_description madpipe::cli::simulate_options_description(SimulateOptions& options) {
  po::options_description group("Simulate options", 100);
  auto add_group = group.add_options();
  add_group("plan", po::value(&options.plan_path)->value_name("FILE")->required(),
            "madpipe.plan/1 JSON file, as written by 'madpipe plan --output'");
  add_group("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
            "the madpipe.profile/1 file the plan was made for");
  add_group(
      "micro-batches",
      po::value(&options.micro_batches)
          ->value_name("N")
          ->default_value(0)
          ->notifier(at_least(0, "--micro-batches")),
      "micro-batches in the simulated step (0: 4 x max(stages, largest NCA), a multiple of k)");
  add_group(
      "policy",
      po::value<std::string>()
          ->value_name("NAME")
          ->default_value("timetable")
          ->notifier([&options](const std::string& name) { options.policy = parse_policy(name); }),
      "timetable: ops start no earlier than planned; asap: as soon as possible");
  po::options_description all(100);
  all.add(group);
  return all;
}

static std::string bytes(std::int64_t value) {
  return madpipe::format_bytes(static_cast<double>(value));
}

static std::string percent(std::int64_t part, std::int64_t whole) {
  return madpipe::cli::fixed(100.0 * static_cast<double>(part) / static_cast<double>(whole), 0) +
         "%";
}

// Lists every violation on stderr, then fails naming the plan file.
[[noreturn]] static void throw_invalid_plan(const std::vector<madpipe::plan::Violation>& list,
                                            const std::string& plan_path) {
  for (const madpipe::plan::Violation& violation : list) {
    std::cerr << "simulate: " << plan_path << ": "
              << (violation.field.empty() ? "" : violation.field + ": ") << violation.problem
              << '\n';
  }
  madpipe::throw_invalid(plan_path, "",
                         "invalid plan: " + std::to_string(list.size()) +
                             (list.size() == 1 ? " violation" : " violations") + " (listed above)");
}

int madpipe::cli::run_simulate(const SimulateOptions& options) {
  const plan::Plan plan = plan::read_plan(options.plan_path);
  const Profile profile = read_profile(options.profile_path);
  const std::vector<plan::Violation> violations = plan::validate(plan, profile);
  if (!violations.empty()) throw_invalid_plan(violations, options.plan_path);

  plan::SimOptions sim_options;
  sim_options.micro_batches = options.micro_batches;
  sim_options.policy = options.policy;
  const plan::SimResult sim = plan::simulate(plan, sim_options);

  // The steady state the simulation replays (a tied weight's exchange, once per step, is not in
  // its pattern).
  const double planned = plan.pattern.normalized_period_ms();
  std::cout << "plan           " << options.plan_path << ": " << plan.profile << ", "
            << plan.algorithm << ", " << plan.stages.size() << " stages, " << plan.pattern.k
            << "-periodic\n"
            << "platform       " << describe(plan.platform) << '\n'
            << "simulated      " << sim.micro_batches << " micro-batches, "
            << policy_name(options.policy) << " policy\n";
  if (plan.step_order && options.policy == plan::StartPolicy::Asap)
    std::cout << "step order     "
              << (plan.step_order->micro_batches == sim.micro_batches
                      ? "the plan's (step_order)"
                      : "the pattern's: the plan's step_order is for " +
                            std::to_string(plan.step_order->micro_batches) + " micro-batches")
              << '\n';
  std::cout << "step time      " << format_ms(sim.step_ms) << " (warm-up and drain included)\n"
            << "steady period  ";
  if (sim.steady_period_ms > 0) {
    std::cout << format_ms(sim.steady_normalized_ms)
              << " per micro-batch; plan: " << format_ms(planned) << ", ratio "
              << fixed(sim.steady_normalized_ms / planned, 3) << "\n\n";
  } else {
    std::cout << "not measured (too few micro-batches; try --micro-batches " << 4 * plan.pattern.k
              << " or more)\n\n";
  }

  const std::int64_t limit = plan.platform.memory_bytes;
  Table gpus{{{"gpu"}, {"simulated peak"}, {"predicted"}, {"peak / limit"}}, {}};
  std::vector<int> over_prediction;
  for (std::size_t g = 0; g < sim.peak_memory_bytes.size(); ++g) {
    const std::int64_t peak = sim.peak_memory_bytes[g];
    const std::int64_t predicted =
        g < plan.predicted.memory_bytes.size() ? plan.predicted.memory_bytes[g] : 0;
    if (peak > predicted) over_prediction.push_back(static_cast<int>(g));
    gpus.rows.push_back({std::to_string(g), bytes(peak), bytes(predicted), percent(peak, limit)});
  }
  print_table(gpus, std::cout);
  std::cout << "memory limit   " << bytes(limit) << " per GPU\n";
  for (int g : over_prediction) {
    std::cerr << "simulate: warning: gpu " << g
              << ": the simulated peak memory is above the plan's prediction\n";
  }
  return 0;
}

int madpipe::cli::simulate_command(const std::vector<std::string>& args) {
  SimulateOptions options;
  const po::options_description description = simulate_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;
  return run_simulate(options);
}
