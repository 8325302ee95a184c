// Graph rematerialization (Moccasin, schedule/moccasin.hpp) on stage graphs built from the
// shipped profiles, printed as a table; nothing is asserted.
//
//   moccasin_bench [TIME_LIMIT_S]   MILP time limit per solve (default 20)
//
// For each graph and for budgets of 90% and 80% of the no-remat peak of its input order: the size
// of the staged MILP, the status, what made the plan, its time overhead over Σ durations, the best
// lower bound's overhead, the greedy/ROTOR hint's overhead, the plan's peak over the budget and
// the wall time of moccasin_remat().

#include "core/profile.hpp"
#include "core/units.hpp"
#include "remat/moccasin.hpp"
#include "remat/remat_heuristic.hpp"
#include "remat/stage_graph.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace madpipe;

static Profile shipped(const std::string& name) {
  return read_profile(std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json");
}

struct Case {
  std::string label;
  remat::RematGraph graph;
};

static int edges_of(const remat::RematGraph& graph) {
  int edges = 0;
  for (const remat::RematNode& node : graph.nodes) edges += static_cast<int>(node.inputs.size());
  return edges;
}

int main(int argc, char** argv) {
  const double time_limit_s = argc > 1 ? std::atof(argv[1]) : 20.0;
  const Profile gpt = shipped("gpt2_small");
  const Profile resnet = shipped("resnet50");
  const std::vector<Case> cases = {
      {"gpt2_small h.0-h.3 ops", remat::stage_graph(gpt, 1, 4)},
      {"resnet50 layer2.0-2.3 ops", remat::stage_graph(resnet, 7, 10)},
      {"resnet50 layers 0-20 chain", remat::layer_chain_graph(resnet, 0, 20)},
  };
  remat::MoccasinOptions options;
  options.solve.time_limit_s = time_limit_s;
  std::printf("Moccasin MILP (staged variant, C = %d, time limit %.0f s per solve)\n",
              options.max_computations, time_limit_s);
  std::printf("%-27s %5s %5s %6s %6s %6s %10s %-27s %9s %9s %9s %11s %8s\n", "graph", "nodes",
              "edges", "vars", "rows", "budget", "status", "plan by", "overhead", "bound", "hint",
              "peak/budget", "seconds");
  for (const Case& c : cases) {
    const std::int64_t peak = remat::no_remat_peak_bytes(c.graph);
    for (int percent : {90, 80}) {
      const std::int64_t budget = peak / 100 * percent;
      const remat::RematHint hint =
          remat::best_remat_hint(c.graph, budget, options.max_computations);
      const solver::Model model =
          remat::moccasin_model(c.graph, budget, options, remat::MoccasinVariant::Staged);
      const remat::MoccasinResult result = remat::moccasin_remat(c.graph, budget, options);
      const double base = result.base_ms;
      std::printf(
          "%-27s %5d %5d %6d %6d %5d%% %10s %-27s %8.2f%% %8.2f%% %8.2f%% %11.3f %8.1f\n",
          c.label.c_str(), c.graph.size(), edges_of(c.graph), model.num_vars(), model.num_rows(),
          percent, std::string(solver::to_string(result.status)).c_str(), result.method.c_str(),
          100 * result.overhead(), 100 * (result.bound_ms / base - 1),
          hint.sequence.empty() ? 0.0 : 100 * (hint.total_ms / base - 1),
          static_cast<double>(result.peak_bytes) / static_cast<double>(budget), result.seconds);
      std::printf("    no-remat peak %s, budget %s: %s\n",
                  format_bytes(static_cast<double>(peak)).c_str(),
                  format_bytes(static_cast<double>(budget)).c_str(), result.note.c_str());
    }
  }
  return 0;
}
