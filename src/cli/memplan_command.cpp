#include "cli/memplan_command.hpp"

#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "schedule/address_plan.hpp"
#include "schedule/memory.hpp"
#include "schedule/plan.hpp"
#include "schedule/remat_chain.hpp"
#include "schedule/remat_sequence.hpp"
#include "schedule/tensor_graph.hpp"

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
    "of micro-batches in flight come from the plan."};

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
      "MILP solver of the address ILP: cbc or glpk (default: the first built)");
  add("time-limit",
      po::value(&options.time_limit_s)
          ->value_name("SECONDS")
          ->default_value(options.time_limit_s)
          ->notifier([](double s) {
            if (!(s > 0)) throw_invalid("", "--time-limit", "must be > 0 seconds");
          }),
      "time budget of the address ILP; on timeout the best solution found, or greedy, is kept");
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
};
}  // namespace

static StageChoice choose_stage(const madpipe::cli::MemplanOptions& options, int layers) {
  using madpipe::throw_invalid;
  StageChoice choice;
  if (options.plan_path.empty()) {
    if (options.stage >= 0) throw_invalid("", "--stage", "needs --plan");
    if (options.first_layer < 0 || options.last_layer < 0)
      throw_invalid("", "--first", "give the stage's layers (--first and --last) or --plan");
    choice = {options.first_layer, options.last_layer, options.sequence,
              std::max(options.in_flight, 1)};
  } else {
    if (options.first_layer >= 0 || options.last_layer >= 0 || !options.sequence.empty())
      throw_invalid("", "--plan", "takes the stage from the plan: drop --first, --last and "
                                  "--remat-sequence");
    const madpipe::schedule::Plan plan = madpipe::schedule::read_plan(options.plan_path);
    const int stages = static_cast<int>(plan.stages.size());
    if (options.stage < 0 || options.stage >= stages)
      throw_invalid("", "--stage",
                    "must be a stage of " + options.plan_path + " (0.." +
                        std::to_string(stages - 1) + "), got " + std::to_string(options.stage));
    const madpipe::schedule::Stage& stage = plan.stages[static_cast<std::size_t>(options.stage)];
    if (stage.offload != "none")
      throw_invalid("", "--stage", "offloading stages are not planned yet (offload " +
                                       stage.offload + ")");
    const std::vector<int> nca = madpipe::schedule::concurrent_activations(plan.pattern, stages);
    choice = {stage.first_layer, stage.last_layer, stage.sequence,
              options.in_flight > 0 ? options.in_flight
                                    : std::max(1, nca[static_cast<std::size_t>(options.stage)])};
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
  return "+" + madpipe::cli::fixed(100.0 * static_cast<double>(value - bound) /
                                       static_cast<double>(bound),
                                   2) +
         "%";
}

int madpipe::cli::run_memplan(const MemplanOptions& options) {
  using namespace madpipe::schedule;
  const Profile profile = read_profile(options.profile_path);
  const StageChoice choice = choose_stage(options, static_cast<int>(profile.layers.size()));
  const RematChain chain = stage_remat_chain(profile, choice.first, choice.last);
  const RematSequence sequence = parse_remat_sequence(choice.sequence, chain);
  const TensorGraph graph = stage_tensor_graph(chain, sequence, choice.in_flight);
  const std::vector<Buffer> buffers = buffers_of(graph);

  AddressIlpOptions ilp;
  ilp.backend = options.solver;
  ilp.solve.time_limit_s = options.time_limit_s;
  const AddressPlan plan = ilp_address_plan(buffers, ilp);

  std::cout << "stage      layers " << choice.first << ".." << choice.last << " of "
            << profile.name << ", " << choice.in_flight << " micro-batch"
            << (choice.in_flight > 1 ? "es" : "") << " in flight, "
            << (sequence.empty() ? std::string("no remat") : "sequence " + choice.sequence)
            << '\n'
            << "graph      " << graph.nodes.size() << " ops, " << graph.tensors.size()
            << " tensors\n\n";
  Table tensors{{{"tensor", Align::Left}, {"size"}, {"live from", Align::Left},
                 {"to", Align::Left}, {"offset"}},
                {}};
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    tensors.rows.push_back({b.name, bytes(b.size_bytes),
                            graph.nodes[static_cast<std::size_t>(b.first)].name,
                            graph.nodes[static_cast<std::size_t>(b.last)].name,
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
  if (plan.method == PlanMethod::Ilp) {
    row("ilp", plan.arena_bytes);
  } else {
    arenas.rows.push_back({"ilp", "-", "-", "not used"});
  }
  row("greedy by start", by_start.arena_bytes);
  row("greedy largest first", largest.arena_bytes);
  row("sum of sizes", plan.sum_bytes());
  row("lower bound", plan.lower_bound_bytes);
  std::cout << '\n';
  print_table(arenas, std::cout, "  ");
  if (!overlapping_live_buffers(plan).empty())
    throw Error(ErrorKind::Internal, "", "", "the memory plan overlaps live tensors");
  std::cout << "\nused       " << to_string(plan.method) << ": " << bytes(plan.arena_bytes) << " ("
            << plan.note << ")\n";
  return 0;
}

int madpipe::cli::memplan_command(const std::vector<std::string>& args) {
  MemplanOptions options;
  const po::options_description description = memplan_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;
  return run_memplan(options);
}
