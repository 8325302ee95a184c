#include "remat/moccasin.hpp"

#include "core/error.hpp"
#include "core/profile.hpp"
#include "remat/remat_graph.hpp"
#include "remat/remat_heuristic.hpp"
#include "remat/stage_graph.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace madpipe::remat {
namespace {

#define MADPIPE_SKIP_WITHOUT_BACKEND() \
  if (solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built"

// Nodes named "0", "1", ...; edges (u, v) with u < v.
RematGraph make_graph(const std::vector<double>& durations, const std::vector<std::int64_t>& sizes,
                      const std::vector<std::pair<int, int>>& edges) {
  RematGraph graph;
  for (std::size_t v = 0; v < durations.size(); ++v)
    graph.nodes.push_back({std::to_string(v), durations[v], sizes[v], {}, true});
  for (const auto& [u, v] : edges) graph.nodes[static_cast<std::size_t>(v)].inputs.push_back(u);
  return graph;
}

// Small example graphs: sizes 1, durations 3 unless stated.
RematGraph unet(int k) {  // a U-Net: a chain of 2k + 1 nodes with skips i -> 2k - i
  const int n = 2 * k + 1;
  std::vector<std::pair<int, int>> edges;
  for (int v = 1; v < n; ++v) edges.emplace_back(v - 1, v);
  for (int i = 0; i < k; ++i) edges.emplace_back(i, n - 1 - i);
  return make_graph(std::vector<double>(static_cast<std::size_t>(n), 3.0),
                    std::vector<std::int64_t>(static_cast<std::size_t>(n), 1), edges);
}

// Where the input order matters: with durations {1, 10, 5, 5, 5} at budget 4, the best order
// takes 26 ms and the stage variant for the input order 27.
RematGraph order_matters(std::vector<double> durations) {
  return make_graph(durations, {1, 1, 2, 1, 1}, {{0, 4}, {1, 4}, {2, 3}, {3, 4}});
}

MoccasinOptions options_for(MoccasinVariant variant, int max_computations = 2) {
  MoccasinOptions options;
  options.variant = variant;
  options.max_computations = max_computations;
  options.solve.time_limit_s = 20;
  return options;
}

// Every plan re-simulates as valid, within the budget and the cap, with the reported figures.
void expect_consistent(const RematGraph& graph, const MoccasinResult& result, int cap) {
  if (!result.has_plan()) return;
  const GraphReplay replay = simulate_remat(graph, result.sequence);
  ASSERT_TRUE(replay.valid) << replay.problem;
  EXPECT_LE(replay.peak_bytes, result.budget_bytes);
  EXPECT_EQ(replay.peak_bytes, result.peak_bytes);
  EXPECT_DOUBLE_EQ(replay.total_ms, result.total_ms);
  EXPECT_EQ(replay.computations, result.computations);
  for (int c : replay.computations) EXPECT_LE(c, cap);
  EXPECT_GE(result.total_ms, result.base_ms - 1e-9);
  EXPECT_LE(result.bound_ms, result.total_ms + 1e-6);
}

MoccasinResult solve(const RematGraph& graph, std::int64_t budget, MoccasinVariant variant,
                     int cap = 2) {
  const MoccasinResult result = moccasin_remat(graph, budget, options_for(variant, cap));
  expect_consistent(graph, result, cap);
  return result;
}

constexpr MoccasinVariant kVariants[] = {MoccasinVariant::Staged, MoccasinVariant::OrderFree};

// --- simulator -----------------------------------------------------------------------------

TEST(RematGraphSimulator, ReplaysAOneRecomputationSequenceOfUnetK2) {
  const RematGraph graph = unet(2);
  // 0, 1, (free 0), 2, 3, 0, 4 with memory 1, 2, 2, 3, 2, 3 during the computations.
  const GraphSequence sequence = {{0, {}}, {1, {0}}, {2, {}}, {3, {1, 2}}, {0, {}}, {4, {0, 3, 4}}};
  const GraphReplay replay = simulate_remat(graph, sequence);
  ASSERT_TRUE(replay.valid) << replay.problem;
  EXPECT_DOUBLE_EQ(replay.total_ms, 18);
  EXPECT_EQ(replay.peak_bytes, 3);
  EXPECT_EQ(replay.computations, (std::vector<int>{2, 1, 1, 1, 1}));
}

TEST(RematGraphSimulator, RejectsAMissingInputNamingStepAndNodes) {
  const RematGraph graph = unet(2);
  const GraphReplay replay =
      simulate_remat(graph, {{0, {}}, {1, {0}}, {2, {}}, {3, {1, 2}}, {4, {}}});
  EXPECT_FALSE(replay.valid);
  EXPECT_EQ(replay.problem, "step 5: node '4' needs '0', which is not resident");
}

TEST(RematGraphSimulator, RejectsOtherBrokenSequences) {
  const RematGraph graph = unet(2);
  auto problem = [&](const GraphSequence& sequence) {
    const GraphReplay replay = simulate_remat(graph, sequence);
    EXPECT_FALSE(replay.valid);
    return replay.problem;
  };
  EXPECT_EQ(problem({{0, {}}, {0, {}}}),
            "step 2: node '0' is computed while its output is still resident");
  EXPECT_EQ(problem({{0, {1}}}), "step 1: frees '1', which is not resident");
  EXPECT_EQ(problem({{7, {}}}), "step 1: node 7 does not exist");
  EXPECT_EQ(problem({{0, {}}, {1, {}}}), "node '2' is never computed");
  RematGraph fixed = graph;
  fixed.nodes[0].recomputable = false;
  const GraphReplay again = simulate_remat(fixed, {{0, {0}}, {0, {}}});
  EXPECT_EQ(again.problem, "step 2: node '0' cannot be recomputed");
}

TEST(RematGraphSimulator, EarliestFreesGiveTheLeastMemoryOfAnOrder) {
  const RematGraph graph = unet(2);
  const GraphSequence sequence = with_earliest_frees(graph, {0, 1, 2, 3, 0, 4});
  EXPECT_EQ(sequence[1].freed, (std::vector<int>{0}));  // the first copy of 0 dies after 1
  const GraphReplay replay = simulate_remat(graph, sequence);
  ASSERT_TRUE(replay.valid) << replay.problem;
  EXPECT_EQ(replay.peak_bytes, 3);
  EXPECT_EQ(no_remat_peak_bytes(graph), 4);
  EXPECT_EQ(no_remat_peak_bytes(unet(3)), 5);
  EXPECT_EQ(no_remat_peak_bytes(order_matters({1, 10, 5, 5, 5})), 5);
}

TEST(RematGraphValidation, NamesTheCulprit) {
  RematGraph graph = unet(2);
  EXPECT_NO_THROW(check_remat_graph(graph));
  graph.nodes[3].inputs.push_back(4);
  try {
    check_remat_graph(graph);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidInput);
    EXPECT_EQ(e.field(), "/nodes/3/inputs/2");
    EXPECT_EQ(e.problem(),
              "input 4 must come before node 3 in the input order (a topological order)");
  }
  graph = unet(2);
  graph.nodes[2].name = "1";
  EXPECT_THROW(check_remat_graph(graph), Error);
  graph = unet(2);
  graph.nodes[1].size_bytes = -1;
  EXPECT_THROW(check_remat_graph(graph), Error);
  graph = unet(2);
  graph.nodes[4].inputs.push_back(3);
  EXPECT_THROW(check_remat_graph(graph), Error);
  EXPECT_THROW(check_remat_graph(RematGraph{}), Error);
}

// --- builders ------------------------------------------------------------------------------

double sum_durations(const RematGraph& graph, bool backward) {
  double sum = 0;
  for (const RematNode& node : graph.nodes)
    if ((node.name.rfind("B:", 0) == 0) == backward) sum += node.duration_ms;
  return sum;
}

// Outputs a backward node reads from the forward are all resident when grad_output arrives.
std::int64_t kept_for_backward(const RematGraph& graph) {
  std::vector<bool> kept(graph.nodes.size(), false);
  for (const RematNode& node : graph.nodes)
    if (node.name.rfind("B:", 0) == 0)
      for (int u : node.inputs)
        if (graph.nodes[static_cast<std::size_t>(u)].name.rfind("B:", 0) != 0)
          kept[static_cast<std::size_t>(u)] = true;
  std::int64_t sum = 0;
  for (std::size_t v = 0; v < kept.size(); ++v)
    if (kept[v] && graph.nodes[v].name != "grad_output") sum += graph.nodes[v].size_bytes;
  return sum;
}

TEST(RematGraphBuilder, GptBlocksExpandIntoTwelveForwardOpsWithTheLayerTimes) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const RematGraph graph = stage_graph(profile, 1, 4);
  EXPECT_NO_THROW(check_remat_graph(graph));
  EXPECT_EQ(graph.size(), 2 + 4 * (12 + 13));  // attn_v has a backward node per input
  double forward = 0, backward = 0;
  std::int64_t kept = 0;
  for (int l = 1; l <= 4; ++l) {
    forward += profile.layers[static_cast<std::size_t>(l)].forward_ms;
    backward += profile.layers[static_cast<std::size_t>(l)].backward_ms;
    kept += profile.layers[static_cast<std::size_t>(l)].saved_bytes;
  }
  EXPECT_NEAR(sum_durations(graph, false), forward, 1e-9);
  EXPECT_NEAR(sum_durations(graph, true), backward, 1e-9);
  EXPECT_EQ(graph.nodes[0].name, "input");
  EXPECT_FALSE(graph.nodes[0].recomputable);
  EXPECT_EQ(graph.nodes[13].name, "h.1.ln1");                             // layer 1 is h.0
  EXPECT_EQ(graph.nodes[12].size_bytes, profile.layers[1].output_bytes);  // h.0.add2
  const RematNode& to_softmax = graph.nodes[static_cast<std::size_t>(graph.size() - 6)];
  EXPECT_EQ(to_softmax.name, "B:h.0.attn_v:h.0.softmax");
  EXPECT_EQ(to_softmax.size_bytes, graph.nodes[4].size_bytes);
  // Layer sizes split saved_bytes exactly over all ops but the last.
  std::int64_t layer_sizes = 0;
  for (int v = 1; v <= 12; ++v) layer_sizes += graph.nodes[static_cast<std::size_t>(v)].size_bytes;
  EXPECT_EQ(layer_sizes, profile.layers[1].saved_bytes + profile.layers[1].output_bytes);
  const std::int64_t peak = no_remat_peak_bytes(graph);
  EXPECT_GE(peak, kept_for_backward(graph));
  EXPECT_GE(kept_for_backward(graph), kept / 2);  // most of what the profile saves stays
  EXPECT_FALSE(as_training_chain(graph).has_value());
}

TEST(RematGraphBuilder, ResNetBottlenecksHaveSkipsAndADownsampleInTheirFirstBlock) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const RematGraph graph = stage_graph(profile, 7, 10);  // layer2.0 .. layer2.3
  EXPECT_NO_THROW(check_remat_graph(graph));
  EXPECT_EQ(graph.size(), 2 + 2 * (12 + 3 * 10));
  EXPECT_EQ(graph.nodes[11].name, "layer2.0.add");
  EXPECT_EQ(graph.nodes[11].inputs, (std::vector<int>{8, 10}));  // bn3 and downsample.bn
  EXPECT_EQ(graph.nodes[21].name, "layer2.1.add");
  EXPECT_EQ(graph.nodes[21].inputs, (std::vector<int>{20, 12}));  // bn3 and the block input
  double forward = 0;
  for (int l = 7; l <= 10; ++l) forward += profile.layers[static_cast<std::size_t>(l)].forward_ms;
  EXPECT_NEAR(sum_durations(graph, false), forward, 1e-9);
  EXPECT_GE(no_remat_peak_bytes(graph), kept_for_backward(graph));
  const RematGraph whole = stage_graph(profile, 0, 20);  // other layers stay single nodes
  EXPECT_NO_THROW(check_remat_graph(whole));
}

TEST(RematGraphBuilder, LayerChainGraphIsATrainingChainForRotor) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const RematGraph graph = layer_chain_graph(profile, 0, 5);
  EXPECT_EQ(graph.size(), 2 + 2 * 6);
  const std::optional<TrainingChain> chain = as_training_chain(graph);
  ASSERT_TRUE(chain.has_value());
  EXPECT_EQ(chain->forward.size(), 7u);
  EXPECT_EQ(chain->gradient, 7);
  EXPECT_EQ(chain->backward.front(), graph.size() - 1);  // B:conv1 comes last
  EXPECT_EQ(graph.nodes.back().size_bytes, 0);           // the model's input needs no gradient
  EXPECT_THROW(stage_graph(profile, 5, 3), Error);
  EXPECT_THROW(layer_chain_graph(profile, 0, 21), Error);
}

// --- heuristics ----------------------------------------------------------------------------

TEST(RematGraphHeuristic, GreedyFindsStagedSequencesWithinTheBudget) {
  for (const auto& [graph, budget] : {std::pair<RematGraph, std::int64_t>{unet(2), 3},
                                      {unet(3), 4},
                                      {order_matters({1, 10, 5, 5, 5}), 4}}) {
    const RematHint hint = best_remat_hint(graph, budget, 2);
    ASSERT_FALSE(hint.sequence.empty());
    const GraphReplay replay = simulate_remat(graph, hint.sequence);
    ASSERT_TRUE(replay.valid) << replay.problem;
    EXPECT_LE(replay.peak_bytes, budget);
    EXPECT_DOUBLE_EQ(replay.total_ms, hint.total_ms);
  }
  EXPECT_TRUE(greedy_remat_nodes(unet(3), 3, 2, EvictionRule::CheapestPerByte).empty());
}

TEST(RematGraphHeuristic, RotorSolvesTrainingChains) {
  const Profile profile = read_profile(testing::shipped_profile_path("resnet50"));
  const RematGraph graph = layer_chain_graph(profile, 0, 8);
  const std::int64_t budget = no_remat_peak_bytes(graph) * 7 / 10;
  const std::optional<TrainingChain> chain = as_training_chain(graph);
  ASSERT_TRUE(chain.has_value());
  const std::vector<int> nodes = rotor_remat_nodes(graph, *chain, budget);
  ASSERT_FALSE(nodes.empty());
  const GraphReplay replay = simulate_remat(graph, with_earliest_frees(graph, nodes));
  ASSERT_TRUE(replay.valid) << replay.problem;
  EXPECT_LE(replay.peak_bytes, budget);
  EXPECT_GT(replay.total_ms, base_duration_ms(graph));         // it recomputes
  const RematHint hint = best_remat_hint(graph, budget, 100);  // rotor or a better greedy
  EXPECT_LE(hint.total_ms, replay.total_ms);
}

// --- Moccasin ------------------------------------------------------------------------------

TEST(MoccasinEvents, StageVariantIndexingOfT7) {
  EXPECT_EQ(staged_event_count(4), 10);
  const std::vector<std::vector<int>> expected = {{1, 2, 4, 7}, {3, 5, 8}, {6, 9}, {10}};
  for (int rank = 1; rank <= 4; ++rank) {
    std::vector<int> events;
    for (int stage = rank; stage <= 4; ++stage) events.push_back(staged_event(rank, stage));
    EXPECT_EQ(events, expected[static_cast<std::size_t>(rank - 1)]) << "rank " << rank;
    EXPECT_EQ(staged_event(rank, rank), rank * (rank + 1) / 2);
  }
}

TEST(MoccasinPrecheck, ReportsANodeThatCannotFit) {
  EXPECT_EQ(infeasible_budget_reason(unet(2), 2),
            "node '3' (3) needs its 2 inputs and its output: 3 > 2");
  EXPECT_EQ(infeasible_budget_reason(unet(2), 3), "");
  EXPECT_EQ(infeasible_budget_reason(order_matters({1, 10, 5, 5, 5}), 3),
            "node '4' (4) needs its 3 inputs and its output: 4 > 3");
  const MoccasinResult result = moccasin_remat(unet(2), 2, MoccasinOptions{});
  EXPECT_EQ(result.status, solver::Status::Infeasible);
  EXPECT_FALSE(result.has_plan());
  EXPECT_EQ(result.note, "node '3' (3) needs its 2 inputs and its output: 3 > 2");
}

TEST(MoccasinSolve, NoRecomputationWhenTheInputOrderFits) {
  const MoccasinResult result = solve(unet(2), 4, MoccasinVariant::Auto);
  EXPECT_EQ(result.status, solver::Status::Optimal);
  EXPECT_EQ(result.method, "no remat");
  EXPECT_DOUBLE_EQ(result.total_ms, 15);
  EXPECT_EQ(result.no_remat_peak_bytes, 4);
  EXPECT_DOUBLE_EQ(result.overhead(), 0);
}

TEST(MoccasinSolve, UnetK2NeedsOneRecomputationAtBudget3) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  for (MoccasinVariant variant : kVariants) {
    const MoccasinResult result = solve(unet(2), 3, variant);
    EXPECT_EQ(result.status, solver::Status::Optimal) << to_string(variant) << ": " << result.note;
    EXPECT_DOUBLE_EQ(result.total_ms, 18) << to_string(variant);
    EXPECT_EQ(result.computations, (std::vector<int>{2, 1, 1, 1, 1})) << to_string(variant);
    EXPECT_NEAR(result.overhead(), 0.2, 1e-12);
  }
}

TEST(MoccasinSolve, UnetK3AtBudgets4And3AndTheCap) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  const RematGraph graph = unet(3);
  EXPECT_DOUBLE_EQ(solve(graph, 5, MoccasinVariant::Auto).total_ms, 21);
  for (MoccasinVariant variant : kVariants) {
    const MoccasinResult four = solve(graph, 4, variant);
    EXPECT_EQ(four.status, solver::Status::Optimal) << to_string(variant) << ": " << four.note;
    EXPECT_DOUBLE_EQ(four.total_ms, 24) << to_string(variant);
    // One recomputation: node 0 or node 1 (both are optimal).
    EXPECT_EQ(std::accumulate(four.computations.begin(), four.computations.end(), 0), 8);

    const MoccasinResult three = solve(graph, 3, variant, 3);
    EXPECT_EQ(three.status, solver::Status::Optimal) << to_string(variant) << ": " << three.note;
    EXPECT_DOUBLE_EQ(three.total_ms, 30) << to_string(variant);
    EXPECT_EQ(three.computations, (std::vector<int>{3, 2, 1, 1, 1, 1, 1})) << to_string(variant);

    const MoccasinResult capped = solve(graph, 3, variant, 2);
    EXPECT_EQ(capped.status, solver::Status::Infeasible)
        << to_string(variant) << ": " << capped.note;
    EXPECT_FALSE(capped.has_plan());
  }
}

TEST(MoccasinSolve, InputOrderCostsTheStageVariantOneMs) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  const MoccasinResult free_order =
      solve(order_matters({1, 10, 5, 5, 5}), 4, MoccasinVariant::OrderFree);
  EXPECT_EQ(free_order.status, solver::Status::Optimal) << free_order.note;
  EXPECT_DOUBLE_EQ(free_order.total_ms, 26);
  EXPECT_EQ(free_order.computations, (std::vector<int>{1, 1, 1, 1, 1}));

  const MoccasinResult staged = solve(order_matters({1, 10, 5, 5, 5}), 4, MoccasinVariant::Staged);
  EXPECT_EQ(staged.status, solver::Status::Optimal) << staged.note;
  EXPECT_DOUBLE_EQ(staged.total_ms, 27);
  EXPECT_EQ(staged.computations, (std::vector<int>{2, 1, 1, 1, 1}));  // the cheaper node 0

  const MoccasinResult swapped = solve(order_matters({10, 1, 5, 5, 5}), 4, MoccasinVariant::Staged);
  EXPECT_DOUBLE_EQ(swapped.total_ms, 27);
  EXPECT_EQ(swapped.computations, (std::vector<int>{1, 2, 1, 1, 1}));
}

TEST(MoccasinSolve, EveryBuiltBackendAgreesOnT8) {
  for (const std::string& backend : solver::built_backends()) {
    MoccasinOptions options = options_for(MoccasinVariant::Staged);
    options.backend = backend;
    const MoccasinResult result = moccasin_remat(unet(2), 3, options);
    expect_consistent(unet(2), result, 2);
    EXPECT_DOUBLE_EQ(result.total_ms, 18) << backend << ": " << result.note;
  }
}

// A backend that answers every model with `status` and, for Feasible, all variables at 0.
class StubBackend : public solver::Backend {
 public:
  explicit StubBackend(solver::Status status) : status_(status) {}
  std::string_view name() const override { return "stub"; }
  solver::SolveResult solve(const solver::Model& model, const solver::SolveOptions&) override {
    solver::SolveResult result;
    result.status = status_;
    result.backend = "stub";
    if (status_ == solver::Status::Feasible) {
      result.values.assign(static_cast<std::size_t>(model.num_vars()), 0.0);
      result.objective = 0;
    }
    return result;
  }

 private:
  solver::Status status_;
};

MoccasinResult solve_with_stub(const RematGraph& graph, std::int64_t budget,
                               solver::Status status) {
  const std::string name = "moccasin-test-" + std::string(solver::to_string(status));
  solver::register_backend(name, [status] { return std::make_unique<StubBackend>(status); });
  MoccasinOptions options;
  options.backend = name;
  const MoccasinResult result = moccasin_remat(graph, budget, options);
  expect_consistent(graph, result, options.max_computations);
  return result;
}

TEST(MoccasinFallback, TimeoutWithoutSolutionKeepsTheHint) {
  const MoccasinResult result = solve_with_stub(unet(2), 3, solver::Status::Timeout);
  EXPECT_EQ(result.status, solver::Status::Feasible);
  ASSERT_TRUE(result.has_plan());
  EXPECT_EQ(result.method.rfind("greedy", 0), 0u) << result.method;
  EXPECT_NE(result.note.find("milp timeout (stub, order-free); greedy"), std::string::npos)
      << result.note;
}

TEST(MoccasinFallback, ASolutionTheSimulatorRejectsKeepsTheHint) {
  // All variables at 0: no node computed, which the simulator rejects.
  const MoccasinResult result = solve_with_stub(unet(3), 4, solver::Status::Feasible);
  EXPECT_EQ(result.status, solver::Status::Feasible);
  ASSERT_TRUE(result.has_plan());
  EXPECT_NE(result.note.find("its plan is rejected by the simulator: node '0' is never computed"),
            std::string::npos)
      << result.note;
}

TEST(MoccasinFallback, NoHintAndNoSolutionIsATimeout) {
  const MoccasinResult result = solve_with_stub(unet(3), 3, solver::Status::Timeout);
  EXPECT_EQ(result.status, solver::Status::Timeout) << result.note;
  EXPECT_FALSE(result.has_plan());
}

// One GPT-2 block (26 nodes): the greedy recomputes more than needed at 97% of the no-remat peak,
// finds nothing at 91%, and nothing fits at 87% although every node fits on its own.
class MoccasinGptBlock : public ::testing::Test {
 protected:
  void SetUp() override {
    if (solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built";
    graph_ = stage_graph(read_profile(testing::shipped_profile_path("gpt2_small")), 1, 1);
    peak_ = no_remat_peak_bytes(graph_);
  }
  RematGraph graph_;
  std::int64_t peak_ = 0;
};

TEST_F(MoccasinGptBlock, MilpBeatsTheGreedyHint) {
  const std::int64_t budget = peak_ * 97 / 100;
  const MoccasinResult result = solve(graph_, budget, MoccasinVariant::Staged);
  EXPECT_EQ(result.status, solver::Status::Optimal) << result.note;
  EXPECT_EQ(result.method, "milp");
  EXPECT_LT(result.total_ms, best_remat_hint(graph_, budget, 2).total_ms - 1e-6);
}

TEST_F(MoccasinGptBlock, MilpFindsAPlanWhereTheGreedyFindsNone) {
  const std::int64_t budget = peak_ * 91 / 100;
  EXPECT_TRUE(best_remat_hint(graph_, budget, 2).sequence.empty());
  const MoccasinResult result = solve(graph_, budget, MoccasinVariant::Staged);
  EXPECT_EQ(result.status, solver::Status::Optimal) << result.note;
}

TEST_F(MoccasinGptBlock, MilpProvesWhatThePrecheckMisses) {
  const std::int64_t budget = peak_ * 87 / 100;
  ASSERT_EQ(infeasible_budget_reason(graph_, budget), "");
  const MoccasinResult result = solve(graph_, budget, MoccasinVariant::Staged);
  EXPECT_EQ(result.status, solver::Status::Infeasible) << result.note;
}

TEST(MoccasinSolve, RejectsBadOptions) {
  MoccasinOptions options;
  options.max_computations = 0;
  EXPECT_THROW(moccasin_remat(unet(2), 3, options), Error);
  EXPECT_THROW(moccasin_remat(unet(2), -1, MoccasinOptions{}), Error);
  options = MoccasinOptions{};
  options.backend = "nosuchsolver";
  EXPECT_THROW(moccasin_remat(unet(2), 3, options), Error);
}

// Exhaustive reference: Dijkstra over (resident set, computations per node) with "compute v"
// (inputs resident, under the cap, within the budget) and free "free x" moves.
double oracle_time(const RematGraph& graph, std::int64_t budget, int cap) {
  const int n = graph.size();
  using State = std::pair<unsigned, std::vector<int>>;
  std::map<State, double> best;
  using Entry = std::pair<double, State>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  const State start{0u, std::vector<int>(static_cast<std::size_t>(n), 0)};
  best[start] = 0;
  queue.push({0, start});
  while (!queue.empty()) {
    const auto [time, state] = queue.top();
    queue.pop();
    if (time > best[state]) continue;
    const auto& [resident, counts] = state;
    if (std::all_of(counts.begin(), counts.end(), [](int c) { return c > 0; })) return time;
    std::int64_t memory = 0;
    for (int v = 0; v < n; ++v)
      if (resident >> v & 1u) memory += graph.nodes[static_cast<std::size_t>(v)].size_bytes;
    auto relax = [&](State next, double t) {
      auto it = best.find(next);
      if (it != best.end() && it->second <= t) return;
      best[next] = t;
      queue.push({t, std::move(next)});
    };
    for (int v = 0; v < n; ++v) {
      const RematNode& node = graph.nodes[static_cast<std::size_t>(v)];
      if (resident >> v & 1u) {
        relax({resident & ~(1u << v), counts}, time);
        continue;
      }
      if (counts[static_cast<std::size_t>(v)] >= cap || memory + node.size_bytes > budget) continue;
      bool ready = true;
      for (int u : node.inputs) ready = ready && (resident >> u & 1u);
      if (!ready) continue;
      std::vector<int> more = counts;
      ++more[static_cast<std::size_t>(v)];
      relax({resident | 1u << v, more}, time + node.duration_ms);
    }
  }
  return -1;
}

TEST(MoccasinOracle, OrderFreeMatchesExhaustiveSearchOnRandomDags) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  std::mt19937 rng(7);
  int recomputing = 0;  // cases whose optimum recomputes
  for (int round = 0; round < 16; ++round) {
    const int n = 5 + round % 2;
    std::vector<double> durations;
    std::vector<std::int64_t> sizes;
    std::vector<std::pair<int, int>> edges;
    for (int v = 0; v < n; ++v) {
      durations.push_back(static_cast<double>(1 + rng() % 5));
      sizes.push_back(static_cast<std::int64_t>(1 + rng() % 3));
      for (int u = 0; u < v; ++u)
        if (u == v - 1 || rng() % 100 < 25) edges.emplace_back(u, v);
    }
    const RematGraph graph = make_graph(durations, sizes, edges);
    const std::int64_t peak = no_remat_peak_bytes(graph);
    for (std::int64_t budget = peak - 1; budget > 0; --budget) {
      if (!infeasible_budget_reason(graph, budget).empty()) break;
      const double expected = oracle_time(graph, budget, 2);
      const MoccasinResult free_order = solve(graph, budget, MoccasinVariant::OrderFree);
      const MoccasinResult staged = solve(graph, budget, MoccasinVariant::Staged);
      const std::string where =
          "round " + std::to_string(round) + " budget " + std::to_string(budget);
      if (expected < 0) {
        EXPECT_EQ(free_order.status, solver::Status::Infeasible)
            << where << ": " << free_order.note;
        EXPECT_FALSE(staged.has_plan()) << where;
        continue;
      }
      recomputing += expected > base_duration_ms(graph);
      EXPECT_EQ(free_order.status, solver::Status::Optimal) << where << ": " << free_order.note;
      EXPECT_DOUBLE_EQ(free_order.total_ms, expected) << where;
      if (staged.has_plan()) {
        EXPECT_GE(staged.total_ms, expected - 1e-9) << where;
      }
    }
  }
  EXPECT_GE(recomputing, 5);
}

}  // namespace
}  // namespace madpipe::remat
