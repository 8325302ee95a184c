// Static arenas against PyTorch's caching allocator (docs/planner.md, "Static memory plans"):
// for every stage of a planned ResNet-50 and GPT-2 small pipeline, the activation and workspace
// tensors of the stage's in-flight micro-batches (arena::stage_tensor_graph) placed by
// first fit, by the address ILP around OLLA's pyramid, and replayed through the model of the
// caching allocator (arena::simulate_caching_allocator). Printed as a table with ratios; nothing is
// asserted.
//
//   arena_bench [time limit per ILP in s, default 10]

#include "arena/address_plan.hpp"
#include "arena/caching_allocator.hpp"
#include "arena/tensor_graph.hpp"
#include "core/profile.hpp"
#include "core/units.hpp"
#include "partition/planner.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/memory.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace madpipe;

static Profile shipped(const std::string& name) {
  return read_profile(std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json");
}

static double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); }

struct Totals {
  std::int64_t live = 0, greedy = 0, ilp = 0, caching = 0;
};

static void bench(const std::string& name, int gpus, const std::string& memory, double time_limit,
                  Totals& totals) {
  const Profile profile = shipped(name);
  Platform platform;
  platform.gpus = gpus;
  platform.memory_bytes = parse_bytes(memory, "memory");
  platform.bandwidth_bytes_per_ms = parse_bandwidth("12GB/s", "bandwidth");
  partition::PlannerOptions options;
  options.scheduler = partition::Scheduler::Heuristic;
  const partition::PlanResult result = partition::make_plan(profile, platform, options);
  if (!result.feasible) {
    std::printf("%s: no plan (%s)\n", name.c_str(), result.reason.c_str());
    return;
  }
  const plan::Plan& plan = result.plan;
  const std::vector<int> nca =
      schedule::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  std::printf(
      "\n%s on %d GPUs (%s each), %zu stages; GiB of activations and workspaces per stage\n",
      name.c_str(), gpus, memory.c_str(), plan.stages.size());
  std::printf("%5s %7s %4s %7s %8s %8s %8s %8s %8s %9s %9s %8s\n", "stage", "layers", "nca",
              "tensors", "sum", "live", "greedy", "ilp", "caching", "cach/ilp", "frag", "ilp s");
  for (const schedule::Stage& stage : plan.stages) {
    const remat::RematChain chain =
        remat::stage_remat_chain(profile, stage.first_layer, stage.last_layer);
    const arena::TensorGraph graph =
        arena::stage_tensor_graph(chain, remat::RematSequence{}, nca[stage.id]);
    const std::vector<arena::Buffer> buffers = arena::buffers_of(graph);
    const arena::AddressPlan greedy = arena::best_greedy_address_plan(buffers);
    arena::AddressIlpOptions ilp_options;
    ilp_options.solve.time_limit_s = time_limit;
    ilp_options.pyramid = true;
    const auto started = std::chrono::steady_clock::now();
    const arena::AddressPlan ilp = arena::ilp_address_plan(buffers, ilp_options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const arena::CachingAllocatorPeak caching = arena::simulate_caching_allocator(buffers);
    const std::int64_t live = arena::live_bytes_lower_bound(buffers);
    char layers[16];
    std::snprintf(layers, sizeof layers, "%d-%d", stage.first_layer, stage.last_layer);
    std::printf("%5d %7s %4d %7zu %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %8.1f%% %8.2f%s\n", stage.id,
                layers, nca[stage.id], buffers.size(), gib(greedy.sum_bytes()), gib(live),
                gib(greedy.arena_bytes), gib(ilp.arena_bytes), gib(caching.reserved_bytes),
                static_cast<double>(caching.reserved_bytes) / static_cast<double>(ilp.arena_bytes),
                100.0 * (caching.reserved_bytes - live) / caching.reserved_bytes, seconds,
                ilp.note.empty() ? "" : ("  " + ilp.note).c_str());
    totals.live += live;
    totals.greedy += greedy.arena_bytes;
    totals.ilp += ilp.arena_bytes;
    totals.caching += caching.reserved_bytes;
  }
}

int main(int argc, char** argv) {
  const double time_limit = argc > 1 ? std::atof(argv[1]) : 10.0;
  std::printf(
      "sum: every tensor at its own address; live: the most bytes live at once (no plan\n"
      "needs less); greedy: best first fit; ilp: the address ILP around the pyramid (%.0f s\n"
      "limit); caching: "
      "what the caching allocator model reserves; frag: its share above the live bytes\n",
      time_limit);
  Totals totals;
  bench("resnet50", 4, "16GiB", time_limit, totals);
  bench("gpt2_small", 4, "16GiB", time_limit, totals);
  std::printf(
      "\nall stages: live %.2f GiB, greedy %.2f, ilp %.2f, caching allocator %.2f GiB: the "
      "arena is %.1f%% below the caching allocator (greedy %.1f%%)\n",
      gib(totals.live), gib(totals.greedy), gib(totals.ilp), gib(totals.caching),
      100.0 * (1 - static_cast<double>(totals.ilp) / totals.caching),
      100.0 * (1 - static_cast<double>(totals.greedy) / totals.caching));
  return 0;
}
