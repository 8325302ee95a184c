#include "cli/remat_command.hpp"

#include "cli/platform_options.hpp"
#include "cli/table.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "remat/moccasin.hpp"
#include "remat/pofo.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_graph.hpp"
#include "remat/remat_sequence.hpp"
#include "remat/rotor.hpp"
#include "remat/stage_graph.hpp"

#include <chrono>
#include <iostream>

#include <boost/program_options/value_semantic.hpp>

namespace po = boost::program_options;

static const madpipe::cli::CommandSyntax kSyntax{
    "remat", "--profile FILE --memory SIZE [options]",
    "Computes the optimal rematerialization sequence (ROTOR, thesis ch. 2) of layers\n"
    "[--first-layer, --last-layer] run as one pipeline stage, for a memory budget that holds\n"
    "its activations (weights excluded): which forwards keep their activations, which are\n"
    "recomputed during the backward, the time overhead and the peak memory. With --nca N the\n"
    "memory the forward keeps is charged once per micro-batch in flight, as in a pipeline.\n"
    "With --offload host it also copies activations to host memory during the forward and\n"
    "back for the backward (thesis ch. 4), over a link of --host-bandwidth. With --graph ops\n"
    "(or layers) it plans the stage's training graph of operators (or of layers) instead:\n"
    "which nodes to recompute, at most --max-computations times each, in the least time\n"
    "(Moccasin, a MILP with a greedy or ROTOR sequence as start and fallback)."};

po::options_description madpipe::cli::remat_options_description(RematCommandOptions& options) {
  po::options_description group("Remat options", 100);
  auto add_group = group.add_options();
  add_group("profile", po::value(&options.profile_path)->value_name("FILE")->required(),
            "madpipe.profile/1 JSON file");
  add_group("memory",
            po::value<std::string>()->value_name("SIZE")->required()->notifier(
                [&options](const std::string& text) {
                  options.memory_bytes = parse_bytes(text, "--memory");
                  if (options.memory_bytes <= 0) throw_invalid("", "--memory", "must be > 0");
                }),
            "memory for the stage's activations, e.g. 6GiB");
  add_group("first-layer",
            po::value(&options.first_layer)
                ->value_name("I")
                ->default_value(0)
                ->notifier(at_least(0, "--first-layer")),
            "first layer of the stage");
  add_group("last-layer", po::value(&options.last_layer)->value_name("J")->default_value(-1),
            "last layer of the stage (-1: the profile's last)");
  add_group(
      "nca",
      po::value(&options.nca)->value_name("N")->default_value(1)->notifier(at_least(1, "--nca")),
      "micro-batches in flight on the stage: what the forward keeps counts N times");
  add_group("slots",
            po::value(&options.slots)
                ->value_name("N")
                ->default_value(500)
                ->notifier(at_least(10, "--slots")),
            "memory slots of the DP (sizes round up to whole slots)");
  add_group("offload",
            po::value<std::string>()->value_name("NAME")->default_value("none")->notifier(
                [&options](const std::string& name) {
                  if (name != "none" && name != "host")
                    throw_invalid("", "--offload",
                                  "unknown strategy '" + name + "' (valid: none, host)");
                  options.offload = name == "host";
                }),
            "host: also offload activations to host memory (needs --host-bandwidth)");
  add_group(
      "host-bandwidth",
      po::value<std::string>()->value_name("RATE")->notifier([&options](const std::string& text) {
        options.host_bytes_per_ms = parse_bandwidth(text, "--host-bandwidth");
      }),
      "speed of GPU <-> host copies, e.g. 12GB/s");
  add_group("offload-steps",
            po::value(&options.offload_steps)
                ->value_name("N")
                ->default_value(50)
                ->notifier(at_least(5, "--offload-steps")),
            "memory steps of the offloading DP");
  add_group("graph",
            po::value(&options.graph)->value_name("KIND")->notifier([](const std::string& kind) {
              if (kind != "ops" && kind != "layers")
                throw_invalid("", "--graph", "unknown graph '" + kind + "' (valid: ops, layers)");
            }),
            "plan the stage's training graph: ops (layers expanded into operators) or layers "
            "(one forward and one backward node per layer)");
  add_group("max-computations",
            po::value(&options.max_computations)
                ->value_name("C")
                ->default_value(2)
                ->notifier(at_least(1, "--max-computations")),
            "--graph: computations of a node at most, the first included");
  add_group("variant",
            po::value(&options.variant)
                ->value_name("NAME")
                ->default_value("auto")
                ->notifier([](const std::string& name) {
                  if (name != "auto" && name != "staged" && name != "order-free")
                    throw_invalid(
                        "", "--variant",
                        "unknown variant '" + name + "' (valid: auto, staged, order-free)");
                }),
            "--graph: staged (the input order's stages), order-free, or auto (order-free up to "
            "8 nodes)");
  add_group("solver", po::value(&options.solver)->value_name("NAME"),
            "--graph: MILP solver, cbc or glpk (default: the first built)");
  add_group("time-limit",
            po::value(&options.time_limit_s)
                ->value_name("SECONDS")
                ->default_value(options.time_limit_s)
                ->notifier([](double s) {
                  if (!(s > 0)) throw_invalid("", "--time-limit", "must be > 0 seconds");
                }),
            "--graph: time budget of the MILP; then the best plan found, or the heuristic's");
  po::options_description all(100);
  all.add(group);
  return all;
}

static std::string bytes(std::int64_t value) {
  return madpipe::format_bytes(static_cast<double>(value));
}

// --offload host: the offloading DP with recomputation.
static int run_offload(const madpipe::cli::RematCommandOptions& options,
                       const madpipe::remat::RematChain& chain,
                       const madpipe::remat::SequenceReplay& all) {
  using namespace madpipe;
  using cli::fixed;
  if (!(options.host_bytes_per_ms > 0))
    throw_invalid("", "--offload", "host needs the host link's speed: give --host-bandwidth");
  if (options.nca != 1)
    throw_invalid("", "--nca", "offloading is planned for one micro-batch in flight (--nca 1)");
  const auto started = std::chrono::steady_clock::now();
  const remat::OffloadResult result = remat::optimal_offload_remat(
      chain, options.memory_bytes, options.host_bytes_per_ms, options.offload_steps);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!result.feasible)
    throw Error(ErrorKind::InvalidInput, "", "--memory",
                "no offloading sequence fits in " + bytes(options.memory_bytes) +
                    "; the stage's input alone and its largest layer need more");
  const remat::OffloadReplay& r = result.replay;
  std::cout << "host link      " << format_bandwidth(options.host_bytes_per_ms) << ", "
            << options.offload_steps << " memory steps\n"
            << "time           " << format_ms(r.total_ms) << " (+"
            << fixed(100.0 * (r.total_ms / all.total_ms() - 1), 1) << "% over no remat; "
            << format_ms(r.idle_ms) << " waiting for transfers)\n"
            << "offloaded      " << bytes(r.offloaded_bytes) << " out and back\n"
            << "memory         peak " << bytes(r.peak_bytes) << " ("
            << bytes(r.peak_bytes_release_at_completion)
            << " if offloaded tensors are freed only when their copy ends), kept on the GPU from "
               "forward to backward "
            << bytes(r.stored_bytes) << '\n'
            << "DP time        " << fixed(seconds, 3) << " s\n"
            << "sequence       " << remat::to_string(result.sequence, chain) << '\n';
  return 0;
}

static madpipe::remat::MoccasinVariant variant_named(const std::string& name) {
  using madpipe::remat::MoccasinVariant;
  if (name == "staged") return MoccasinVariant::Staged;
  if (name == "order-free") return MoccasinVariant::OrderFree;
  return MoccasinVariant::Auto;
}

// "conv1 x2, relu1 x2" for the nodes computed more than once; "none" without.
static std::string recomputed_nodes(const madpipe::remat::RematGraph& graph,
                                    const std::vector<int>& computations) {
  std::string text;
  for (std::size_t v = 0; v < computations.size(); ++v) {
    if (computations[v] < 2) continue;
    if (!text.empty()) text += ", ";
    text += graph.nodes[v].name + " x" + std::to_string(computations[v]);
  }
  return text.empty() ? "none" : text;
}

// --graph ops|layers: Moccasin on the stage's training graph.
static int run_graph_remat(const madpipe::cli::RematCommandOptions& options,
                           const madpipe::Profile& profile, int last) {
  using namespace madpipe;
  using cli::fixed;
  if (options.offload) throw_invalid("", "--offload", "is not planned with --graph");
  if (options.nca != 1) throw_invalid("", "--nca", "--graph plans one micro-batch (--nca 1)");
  const remat::RematGraph graph = options.graph == "layers"
                                      ? remat::layer_chain_graph(profile, options.first_layer, last)
                                      : remat::stage_graph(profile, options.first_layer, last);
  remat::MoccasinOptions moccasin;
  moccasin.max_computations = options.max_computations;
  moccasin.variant = variant_named(options.variant);
  moccasin.backend = options.solver;
  moccasin.solve.time_limit_s = options.time_limit_s;
  int edges = 0;
  for (const remat::RematNode& node : graph.nodes) edges += static_cast<int>(node.inputs.size());
  const std::int64_t no_remat = remat::no_remat_peak_bytes(graph);
  const double base = remat::base_duration_ms(graph);
  std::cout << "stage          layers " << options.first_layer << ".." << last << " of "
            << profile.name << " (" << last - options.first_layer + 1 << " layers)\n"
            << "graph          " << graph.size() << " nodes ("
            << (options.graph == "layers" ? "layers" : "operators") << ", forward and backward), "
            << edges << " edges\n"
            << "no remat       " << format_ms(base) << ", peak " << bytes(no_remat)
            << " in the input order\n"
            << "budget         " << bytes(options.memory_bytes) << " ("
            << fixed(100.0 * static_cast<double>(options.memory_bytes) /
                         static_cast<double>(no_remat),
                     0)
            << "% of that), at most " << options.max_computations << " computations per node, "
            << remat::to_string(remat::resolved_variant(graph, moccasin)) << " variant\n";
  const remat::MoccasinResult result = remat::moccasin_remat(graph, options.memory_bytes, moccasin);
  std::cout << "result         " << solver::to_string(result.status);
  if (result.has_plan()) std::cout << " (plan by " << result.method << ")";
  std::cout << ": " << result.note << '\n';
  if (!result.has_plan())
    throw Error(ErrorKind::InvalidInput, "", "--memory",
                "no rematerialization sequence of the graph of layers " +
                    std::to_string(options.first_layer) + ".." + std::to_string(last) +
                    " fits in " + bytes(options.memory_bytes) + ": " + result.note);
  int recomputations = 0, recomputed = 0;
  for (int c : result.computations) {
    recomputations += c - 1;
    recomputed += c > 1;
  }
  std::cout << "time           " << format_ms(result.total_ms) << " (+"
            << fixed(100.0 * result.overhead(), 2) << "% over no remat; " << recomputations
            << " recomputations of " << recomputed << " nodes; lower bound +"
            << fixed(100.0 * (result.bound_ms / base - 1), 2) << "%)\n"
            << "memory         peak " << bytes(result.peak_bytes) << '\n'
            << "solve time     " << fixed(result.seconds, 2) << " s (MILP "
            << fixed(result.solver_seconds, 2) << " s)\n"
            << "recomputed     " << recomputed_nodes(graph, result.computations) << '\n'
            << "sequence       " << remat::to_string(graph, remat::computed_nodes(result.sequence))
            << '\n';
  return 0;
}

int madpipe::cli::run_remat(const RematCommandOptions& options) {
  const Profile profile = read_profile(options.profile_path);
  const int layers = static_cast<int>(profile.layers.size());
  const int last = options.last_layer < 0 ? layers - 1 : options.last_layer;
  if (last >= layers)
    throw_invalid("", "--last-layer",
                  "must be < " + std::to_string(layers) + " (layers of " + options.profile_path +
                      "), got " + std::to_string(last));
  if (options.first_layer > last)
    throw_invalid("", "--first-layer",
                  "must be <= the last layer (" + std::to_string(last) + "), got " +
                      std::to_string(options.first_layer));
  if (!options.graph.empty()) return run_graph_remat(options, profile, last);
  const remat::RematChain chain = remat::stage_remat_chain(profile, options.first_layer, last);
  const remat::SequenceReplay all = remat::replay_sequence(chain, remat::store_all_sequence(chain));
  const std::int64_t all_memory = all.in_flight_bytes(options.nca);
  std::cout << "stage          layers " << options.first_layer << ".." << last << " of "
            << profile.name << " (" << last - options.first_layer + 1 << " layers)\n"
            << "no remat       " << format_ms(all.total_ms()) << ", needs " << bytes(all_memory)
            << (options.nca > 1
                    ? " with " + std::to_string(options.nca) + " micro-batches in flight"
                    : std::string())
            << '\n'
            << "budget         " << bytes(options.memory_bytes) << " ("
            << fixed(100.0 * static_cast<double>(options.memory_bytes) /
                         static_cast<double>(all_memory),
                     0)
            << "% of that)"
            << (options.offload ? std::string() : ", " + std::to_string(options.slots) + " slots")
            << '\n';
  if (options.offload) return run_offload(options, chain, all);
  const auto started = std::chrono::steady_clock::now();
  const remat::RematResult result =
      options.nca == 1
          ? remat::optimal_remat(chain, options.memory_bytes, options.slots)
          : remat::optimal_pipelined_remat(chain, options.nca, options.memory_bytes, options.slots);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!result.feasible) {
    std::cout << "result         no sequence fits (DP took " << fixed(seconds, 2) << " s)\n";
    throw Error(ErrorKind::InvalidInput, "", "--memory",
                "no rematerialization sequence of layers " + std::to_string(options.first_layer) +
                    ".." + std::to_string(last) + " fits in " + bytes(options.memory_bytes) +
                    "; the stage's input alone and its largest layer need more");
  }
  const remat::SequenceReplay& r = result.replay;
  int recomputed = 0;
  for (const remat::RematOp& op : result.sequence)
    recomputed += op.kind != remat::RematOpKind::Backward;
  recomputed -= chain.length();
  std::cout << "time           " << format_ms(r.total_ms()) << " (+"
            << fixed(100.0 * (r.total_ms() / all.total_ms() - 1), 1) << "% over no remat; "
            << recomputed << " forwards recomputed)\n"
            << "memory         peak " << bytes(r.peak_bytes) << ", kept from forward to backward "
            << bytes(r.stored_bytes) << ", transient " << bytes(r.transient_bytes());
  if (options.nca > 1)
    std::cout << "; with " << options.nca << " in flight " << bytes(r.in_flight_bytes(options.nca));
  std::cout << "\nDP time        " << fixed(seconds, 3) << " s\n"
            << "sequence       " << remat::to_string(result.sequence, chain) << '\n';
  return 0;
}

int madpipe::cli::remat_command(const std::vector<std::string>& args) {
  RematCommandOptions options;
  const po::options_description description = remat_options_description(options);
  if (!parse_options(args, kSyntax, description)) return 0;
  return run_remat(options);
}
