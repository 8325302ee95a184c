#include "cli/memplan_command.hpp"

#include "arena/address_plan.hpp"
#include "arena/caching_allocator.hpp"
#include "arena/modulo_memory.hpp"
#include "arena/operator_order.hpp"
#include "arena/tensor_graph.hpp"
#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "plan/plan.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "memplan", "--profile FILE (--first L --last L | --plan FILE --stage S) [options]",
    "Plans the static memory of one pipeline stage (OLLA's address problem): the tensors of\n"
    "layers [--first, --last] (activations, what the backward needs, gradients, workspaces),\n"
    "following its rematerialization sequence, for --in-flight micro-batches at once, each get\n"
    "an offset in one arena so that tensors live at the same time never overlap. Compares the\n"
    "arena of the address ILP with greedy first-fit, the sum of all sizes and the lower bound\n"
    "(the most bytes ever live at once). With --plan, the stage, its sequence and its number\n"
    "of micro-batches in flight come from the plan. --order ilp first reorders the ops inside\n"
    "each micro-batch's forward and backward part for the smallest resident peak (OLLA's\n"
    "operator-order ILP); --pyramid stacks nested lifetimes before the address ILP;\n"
    "--steady-state plans the periodic steady state instead of one window: one slot set per\n"
    "micro-batch in flight, lifetimes wrapping around the period, offsets valid in every period."};

po::options_description madpipe::cli::memplan_options_description(MemplanOptions& options) {
  po::options_description group("Memplan options", 100);
  auto add = group.add_options();
  add("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
      "madpipe.profile/1 JSON file");
  add("first", po::value(&options.first_layer)->value_name("L")->notifier(at_least(0, "--first")),
      "first layer of the stage");
  add("last", po::value(&options.last_layer)->value_name("L")->notifier(at_least(0, "--last")),
      "last layer of the stage");
  add("remat-sequence", po::value(&options.sequence)->value_name("TEXT"),
      "the stage's operation sequence, as 'madpipe remat' prints it (default: no remat)");
  add("plan", po::value(&options.plan_path)->value_name("FILE"),
      "madpipe.plan/1 file: take the stage from it (with --stage)");
  add("stage", po::value(&options.stage)->value_name("S")->notifier(at_least(0, "--stage")),
      "stage index in the plan");
  add("in-flight",
      po::value(&options.in_flight)->value_name("N")->notifier(at_least(1, "--in-flight")),
      "micro-batches in flight on the stage (default: its NCA in the plan, else 1)");
  add("solver", po::value(&options.solver)->value_name("NAME"),
      "MILP solver of the ILPs: cbc or glpk (default: the first built)");
  add("time-limit",
      po::value(&options.time_limit_s)
          ->value_name("SECONDS")
          ->default_value(options.time_limit_s)
          ->notifier([](double s) {
            if (!(s > 0)) throw_invalid("", "--time-limit", "must be > 0 seconds");
          }),
      "time budget of each ILP; on timeout the best solution found, or greedy, is kept");
  add("order",
      po::value(&options.order)
          ->value_name("given|ilp")
          ->default_value(options.order)
          ->notifier([](const std::string& name) {
            if (name != "given" && name != "ilp")
              throw_invalid("", "--order", "unknown order '" + name + "' (valid: given, ilp)");
          }),
      "operator order: the sequence's own (given), or the order ILP's (ilp) inside each "
      "micro-batch's forward and backward part");
  add("pyramid", po::bool_switch(&options.pyramid),
      "stack nested lifetimes at fixed offsets before the address ILP (fewer variables)");
  add("steady-state", po::bool_switch(&options.steady_state),
      "plan the periodic steady state (1F1B, or the plan's pattern with --plan): offsets valid "
      "in every period, lifetimes may wrap around its end");
  add("periods", po::value(&options.periods)->value_name("N")->notifier(at_least(1, "--periods")),
      "with --steady-state: periods on the circle of the modulo plan (default: the fewest that "
      "hold the longest lifetime; more can let micro-batches never in flight together share "
      "offsets)");
  po::options_description all(100);
  all.add(group);
  return all;
}

namespace {
// The stage to plan: its layers, its sequence and its micro-batches in flight.
struct StageChoice {
  int first = 0, last = 0;
  std::string sequence;
  int in_flight = 1;
  // The steady state: the plan's pattern and stage, or 1F1B with in_flight slots on stage 0.
  madpipe::schedule::Pattern pattern;
  int pattern_stage = 0;
};
}  // namespace

static StageChoice choose_stage(const madpipe::cli::MemplanOptions& options, int layers) {
  using madpipe::throw_invalid;
  StageChoice choice;
  if (options.plan_path.empty()) {
    if (options.stage >= 0) throw_invalid("", "--stage", "needs --plan");
    if (options.first_layer < 0 || options.last_layer < 0)
      throw_invalid("", "--first", "give the stage's layers (--first and --last) or --plan");
    choice.first = options.first_layer;
    choice.last = options.last_layer;
    choice.sequence = options.sequence;
    choice.in_flight = std::max(options.in_flight, 1);
    choice.pattern = madpipe::arena::one_f_one_b_stage_pattern(choice.in_flight);
  } else {
    if (options.first_layer >= 0 || options.last_layer >= 0 || !options.sequence.empty())
      throw_invalid("", "--plan",
                    "takes the stage from the plan: drop --first, --last and "
                    "--remat-sequence");
    const madpipe::plan::Plan plan = madpipe::plan::read_plan(options.plan_path);
    const int stages = static_cast<int>(plan.stages.size());
    if (options.stage < 0 || options.stage >= stages)
      throw_invalid("", "--stage",
                    "must be a stage of " + options.plan_path + " (0.." +
                        std::to_string(stages - 1) + "), got " + std::to_string(options.stage));
    const madpipe::schedule::Stage& stage = plan.stages[static_cast<std::size_t>(options.stage)];
    if (stage.offload != madpipe::schedule::OffloadStrategy::None)
      throw_invalid("", "--stage",
                    "offloading stages are not planned yet (offload " +
                        std::string(madpipe::name_of(madpipe::schedule::kOffloadStrategyNames,
                                                     stage.offload)) +
                        ")");
    if (options.steady_state && options.in_flight > 0)
      throw_invalid("", "--in-flight",
                    "the plan's pattern fixes the micro-batches in flight of "
                    "--steady-state: drop --in-flight");
    const std::vector<int> nca = madpipe::schedule::concurrent_activations(plan.pattern, stages);
    choice.first = stage.first_layer;
    choice.last = stage.last_layer;
    choice.sequence = stage.sequence;
    choice.in_flight = options.in_flight > 0
                           ? options.in_flight
                           : std::max(1, nca[static_cast<std::size_t>(options.stage)]);
    choice.pattern = plan.pattern;
    choice.pattern_stage = options.stage;
  }
  if (choice.last >= layers || choice.first > choice.last)
    throw_invalid("", "--last",
                  "layers " + std::to_string(choice.first) + ".." + std::to_string(choice.last) +
                      " are not a range of the profile's " + std::to_string(layers) + " layers");
  return choice;
}

static std::string bytes(std::int64_t value) {
  return madpipe::format_bytes(static_cast<double>(value));
}

static std::string versus(std::int64_t value, std::int64_t bound) {
  if (bound <= 0) return "";
  return "+" +
         madpipe::cli::fixed(
             100.0 * static_cast<double>(value - bound) / static_cast<double>(bound), 2) +
         "%";
}

namespace {
// The buffers to place and the op at each of their timesteps.
struct Timeline {
  std::vector<madpipe::arena::Buffer> buffers;
  std::vector<std::string> steps;
};
}  // namespace

static std::string seconds(double s) { return madpipe::cli::fixed(s, 2) + " s"; }

// One window of the stage (graph line, and the order ILP's line with --order ilp).
static Timeline window_timeline(const madpipe::cli::MemplanOptions& options,
                                const madpipe::remat::RematChain& chain,
                                const madpipe::remat::RematSequence& sequence, int in_flight) {
  using namespace madpipe::arena;
  TensorGraph graph = stage_tensor_graph(chain, sequence, in_flight);
  std::cout << "graph      " << graph.nodes.size() << " ops, " << graph.tensors.size()
            << " tensors\n";
  if (options.order == "ilp") {
    OrderIlpOptions order_options;
    order_options.backend = options.solver;
    order_options.solve.time_limit_s = options.time_limit_s;
    const OperatorOrder order = ilp_operator_order(graph, order_options);
    std::cout << "order      resident peak " << bytes(order.given_peak_bytes) << " given, "
              << bytes(order.peak_bytes) << " reordered ("
              << madpipe::cli::fixed(
                     100.0 * static_cast<double>(order.peak_bytes - order.given_peak_bytes) /
                         static_cast<double>(std::max<std::int64_t>(order.given_peak_bytes, 1)),
                     2)
              << "%); " << order.note;
    if (order.execute_vars > 0)
      std::cout << "; " << order.execute_vars << " X + " << order.preserve_vars << " P variables, "
                << seconds(order.solver_seconds);
    std::cout << '\n';
    graph = reorder(graph, order.order);
  }
  Timeline timeline{buffers_of(graph), {}};
  for (const TensorNode& node : graph.nodes) timeline.steps.push_back(node.name);
  return timeline;
}

// The circle of the periodic steady state (steady and circle lines).
static Timeline steady_timeline(const madpipe::cli::MemplanOptions& options,
                                const StageChoice& choice, const madpipe::remat::RematChain& chain,
                                const madpipe::remat::RematSequence& sequence) {
  using namespace madpipe::arena;
  const SteadyStateBuffers steady =
      steady_state_buffers(chain, sequence, choice.pattern, choice.pattern_stage, options.periods);
  if (options.plan_path.empty()) {
    std::cout << "steady     1F1B: in period j, forward of micro-batch j+" << choice.in_flight - 1
              << ", then backward of micro-batch j\n";
  } else {
    std::cout << "steady     pattern of " << options.plan_path << " (k = " << choice.pattern.k
              << "), stage " << choice.pattern_stage << ": its F and B in start order\n";
  }
  const auto wrapping = std::count_if(steady.buffers.begin(), steady.buffers.end(),
                                      [](const Buffer& b) { return wraps(b); });
  std::cout << "circle     " << steady.periods << " period" << (steady.periods > 1 ? "s" : "")
            << ", " << steady.timesteps() << " ops, " << steady.slot_sets << " slot set"
            << (steady.slot_sets > 1 ? "s" : "") << ", " << steady.buffers.size() << " buffers ("
            << wrapping << " wrap around)\n";
  return {steady.buffers, steady.steps};
}

int madpipe::cli::run_memplan(const MemplanOptions& options) {
  using namespace madpipe::arena;
  using namespace madpipe::remat;
  if (options.steady_state && options.order == "ilp")
    throw_invalid("", "--order", "ilp reorders one window of the stage; not with --steady-state");
  if (!options.steady_state && options.periods > 0)
    throw_invalid("", "--periods", "needs --steady-state");
  const Profile profile = read_profile(options.profile_path);
  const StageChoice choice = choose_stage(options, static_cast<int>(profile.layers.size()));
  const RematChain chain = stage_remat_chain(profile, choice.first, choice.last);
  const RematSequence sequence = parse_remat_sequence(choice.sequence, chain);

  std::cout << "stage      layers " << choice.first << ".." << choice.last << " of " << profile.name
            << ", " << choice.in_flight << " micro-batch" << (choice.in_flight > 1 ? "es" : "")
            << " in flight, "
            << (sequence.empty() ? std::string("no remat") : "sequence " + choice.sequence) << '\n';
  const Timeline timeline = options.steady_state
                                ? steady_timeline(options, choice, chain, sequence)
                                : window_timeline(options, chain, sequence, choice.in_flight);
  const std::vector<Buffer>& buffers = timeline.buffers;

  AddressIlpOptions ilp;
  ilp.backend = options.solver;
  ilp.solve.time_limit_s = options.time_limit_s;
  ilp.pyramid = options.pyramid;
  const AddressPlan plan = ilp_address_plan(buffers, ilp);

  std::cout << '\n';
  Table tensors{{{"tensor", Align::Left},
                 {"size"},
                 {"live from", Align::Left},
                 {"to", Align::Left},
                 {"offset"}},
                {}};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    tensors.rows.push_back(
        {b.name, bytes(b.size_bytes), timeline.steps[static_cast<std::size_t>(b.first)],
         timeline.steps[static_cast<std::size_t>(b.last)] + (wraps(b) ? " (next turn)" : ""),
         bytes(plan.offsets[i])});
  }
  print_table(tensors, std::cout, "  ");

  const AddressPlan by_start = greedy_address_plan(buffers, PlanMethod::GreedyByStart);
  const AddressPlan largest = greedy_address_plan(buffers, PlanMethod::GreedyLargestFirst);
  Table arenas{{{"arena", Align::Left}, {"size"}, {"bytes"}, {"over lower bound"}}, {}};
  auto row = [&](const std::string& name, std::int64_t value) {
    arenas.rows.push_back(
        {name, bytes(value), std::to_string(value), versus(value, plan.lower_bound_bytes)});
  };
  const std::string ilp_name = options.pyramid ? "pyramid + ilp" : "ilp";
  if (plan.method == PlanMethod::Ilp) {
    row(ilp_name, plan.arena_bytes);
  } else {
    arenas.rows.push_back({ilp_name, "-", "-", "not used"});
  }
  row("greedy by start", by_start.arena_bytes);
  row("greedy largest first", largest.arena_bytes);
  row("sum of sizes", plan.sum_bytes());
  // The caching allocator replays one pass; a steady state wraps around, which it cannot.
  const bool linear =
      std::none_of(buffers.begin(), buffers.end(), [](const Buffer& b) { return wraps(b); });
  if (linear) row("caching allocator", simulate_caching_allocator(buffers).reserved_bytes);
  row("lower bound", plan.lower_bound_bytes);
  std::cout << '\n';
  print_table(arenas, std::cout, "  ");
  if (!overlapping_live_buffers(plan).empty())
    throw Error(ErrorKind::Internal, "", "", "the memory plan overlaps live tensors");
  std::cout << "\nused       " << to_string(plan.method) << ": " << bytes(plan.arena_bytes) << " ("
            << plan.note;
  if (plan.solver_seconds > 0) std::cout << ", " << seconds(plan.solver_seconds);
  std::cout << ")\n";
  return 0;
}

int madpipe::cli::memplan_command(const std::vector<std::string>& args) {
  MemplanOptions options;
  const po::options_description description = memplan_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;
  return run_memplan(options);
}
