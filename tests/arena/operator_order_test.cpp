#include "arena/operator_order.hpp"

#include "arena/address_plan.hpp"
#include "arena/lifetime_windows.hpp"
#include "arena/tensor_graph.hpp"
#include "core/error.hpp"
#include "core/profile.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "solver/solve.hpp"
#include "support/test_support.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace madpipe::arena {
namespace {

// Small example graphs, their nodes listed in the given operator order.
TensorGraph simple_graph() {  // peak 70 in the given order, which is optimal
  return make_tensor_graph({"A", "B", "C", "D", "E"}, {{"AB", 10, "A", {"B"}},
                                                       {"BC", 20, "B", {"C"}},
                                                       {"BD", 30, "B", {"D"}},
                                                       {"DE", 40, "D", {"E"}}});
}

std::vector<TensorSpec> diamond_graph_specs() {
  return {{"AB", 10, "A", {"B"}}, {"BC", 20, "B", {"C"}}, {"BD", 30, "B", {"D"}},
          {"DE", 40, "D", {"E"}}, {"EF", 50, "E", {"F"}}, {"CF", 60, "C", {"F"}},
          {"FG", 10, "F", {"G"}}};
}

TensorGraph diamond_graph() {  // peak 150 in the given order, 130 in the best (ABDECFG)
  return make_tensor_graph({"A", "B", "C", "D", "E", "F", "G"}, diamond_graph_specs());
}

std::string names(const TensorGraph& graph, const std::vector<int>& order) {
  std::string out;
  for (int v : order) out += graph.nodes[static_cast<std::size_t>(v)].name;
  return out;
}

// The expected windows below are written counting timesteps from 1.
TimeWindow one_based(int first, int last) { return {first - 1, last - 1}; }

OrderIlpOptions solve_always(double seconds) {
  OrderIlpOptions options;
  options.solve.time_limit_s = seconds;
  options.skip_when_given_optimal = false;
  return options;
}

#define MADPIPE_SKIP_WITHOUT_BACKEND() \
  if (solver::built_backends().empty()) GTEST_SKIP() << "no MILP backend built"

TEST(LifetimeWindows, DiamondWindowsAtSevenTimesteps) {
  const LifetimeWindows windows = lifetime_windows(diamond_graph());
  EXPECT_EQ(windows.horizon, 7);
  const std::vector<TimeWindow> span = {one_based(1, 2), one_based(2, 3), one_based(3, 5),
                                        one_based(3, 4), one_based(4, 5), one_based(5, 6),
                                        one_based(6, 7)};
  EXPECT_EQ(windows.span, span);
  // AB BC BD DE EF CF FG
  const std::vector<TimeWindow> mul = {one_based(1, 3), one_based(2, 5), one_based(2, 4),
                                       one_based(3, 5), one_based(4, 6), one_based(3, 6),
                                       one_based(5, 7)};
  EXPECT_EQ(windows.mul, mul);
  for (const TimeWindow& pres : windows.pres) EXPECT_TRUE(pres.empty());
  int create = 0, preserve = 0;
  for (const Tensor& t : diamond_graph().tensors)
    create += windows.span[static_cast<std::size_t>(t.producer)].size();
  for (const TimeWindow& w : windows.mul) preserve += w.size();
  EXPECT_EQ(create, 15);  // against 2 * 7 * 7 = 98 dense C and P variables
  EXPECT_EQ(preserve, 23);
}

TEST(LifetimeWindows, ChainIsFixedAndShortHorizonsAreRejected) {
  const TensorGraph chain = make_tensor_graph(
      {"A", "B", "C"}, {{"in", 4, "", {"A", "C"}}, {"ab", 1, "A", {"B"}}, {"bc", 2, "B", {"C"}}});
  const LifetimeWindows windows = lifetime_windows(chain);
  for (int v = 0; v < 3; ++v)
    EXPECT_EQ(windows.span[static_cast<std::size_t>(v)], (TimeWindow{v, v}));
  EXPECT_EQ(windows.pres[0], (TimeWindow{0, 2}));  // the input must stay until C
  EXPECT_EQ(windows.pres[1], (TimeWindow{1, 1}));
  EXPECT_THROW(lifetime_windows(chain, 2), Error);
  EXPECT_EQ(lifetime_windows(chain, 5).span[0], (TimeWindow{0, 2}));
}

TEST(MayCoexistPairs, DiamondKeepsThirteenOfTwentyOnePairs) {
  const TensorGraph graph = diamond_graph();
  const auto pairs = may_coexist_pairs(graph, lifetime_windows(graph));
  EXPECT_EQ(pairs.size(), 13u);
  auto index = [&](const std::string& name) {
    for (std::size_t e = 0; e < graph.tensors.size(); ++e)
      if (graph.tensors[e].name == name) return static_cast<int>(e);
    return -1;
  };
  auto kept = [&](const std::string& a, const std::string& b) {
    const std::pair<int, int> pair{std::min(index(a), index(b)), std::max(index(a), index(b))};
    return std::find(pairs.begin(), pairs.end(), pair) != pairs.end();
  };
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{{"AB", "DE"},
                                                                             {"AB", "EF"},
                                                                             {"AB", "CF"},
                                                                             {"AB", "FG"},
                                                                             {"BC", "FG"},
                                                                             {"BD", "EF"},
                                                                             {"BD", "FG"},
                                                                             {"DE", "FG"}})
    EXPECT_FALSE(kept(a, b)) << a << "," << b;
  EXPECT_TRUE(kept("AB", "BD"));  // B consumes AB and makes BD
  EXPECT_TRUE(kept("CF", "FG"));
}

// A random DAG in a topological node order: each node makes 1-2 tensors read by 0-2 later nodes.
TensorGraph random_graph(std::mt19937& rng, int nodes) {
  std::uniform_int_distribution<int> outputs(1, 2), readers(0, 2);
  std::uniform_int_distribution<std::int64_t> size(1, 9);
  std::vector<std::string> node_names;
  for (int v = 0; v < nodes; ++v) node_names.push_back("n" + std::to_string(v));
  std::vector<TensorSpec> tensors;
  tensors.push_back({"in", size(rng), "", {"n0"}});
  for (int v = 0; v + 1 < nodes; ++v) {
    for (int o = outputs(rng); o > 0; --o) {
      TensorSpec spec{"t" + std::to_string(tensors.size()), size(rng), node_names[v], {}};
      std::uniform_int_distribution<int> later(v + 1, nodes - 1);
      std::set<int> users;
      for (int r = readers(rng); r > 0; --r) users.insert(later(rng));
      for (int u : users) spec.consumers.push_back(node_names[static_cast<std::size_t>(u)]);
      tensors.push_back(std::move(spec));
    }
  }
  return make_tensor_graph(node_names, tensors);
}

// Calls `visit` with every execution order of the graph: the exhaustive oracle of the tests.
void for_each_order(const TensorGraph& graph,
                    const std::function<void(const std::vector<int>&)>& visit) {
  const int n = static_cast<int>(graph.nodes.size());
  std::vector<std::vector<int>> predecessors(static_cast<std::size_t>(n));
  for (const Tensor& t : graph.tensors)
    for (int c : t.consumers)
      if (t.producer >= 0) predecessors[static_cast<std::size_t>(c)].push_back(t.producer);
  for (const OrderEdge& e : graph.order_edges)
    predecessors[static_cast<std::size_t>(e.after)].push_back(e.before);
  std::vector<int> order;
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  std::function<void()> extend = [&] {
    if (static_cast<int>(order.size()) == n) return visit(order);
    for (int v = 0; v < n; ++v) {
      const auto& before = predecessors[static_cast<std::size_t>(v)];
      if (done[static_cast<std::size_t>(v)] ||
          !std::all_of(before.begin(), before.end(),
                       [&](int p) { return done[static_cast<std::size_t>(p)]; }))
        continue;
      done[static_cast<std::size_t>(v)] = true;
      order.push_back(v);
      extend();
      order.pop_back();
      done[static_cast<std::size_t>(v)] = false;
    }
  };
  extend();
}

TEST(MayCoexistPairs, CoverEveryPairLiveTogetherInSomeOrder) {
  std::mt19937 rng(5);
  for (int round = 0; round < 6; ++round) {
    const TensorGraph graph = random_graph(rng, 7);
    const auto pairs = may_coexist_pairs(graph, lifetime_windows(graph));
    const std::set<std::pair<int, int>> possible(pairs.begin(), pairs.end());
    for_each_order(graph, [&](const std::vector<int>& order) {
      const std::vector<Buffer> buffers = buffers_of(reorder(graph, order));
      for (std::size_t i = 0; i < buffers.size(); ++i)
        for (std::size_t j = i + 1; j < buffers.size(); ++j)
          if (live_together(buffers[i], buffers[j])) {
            EXPECT_TRUE(possible.count({static_cast<int>(i), static_cast<int>(j)}))
                << graph.tensors[i].name << "," << graph.tensors[j].name;
          }
    });
  }
}

TEST(OperatorOrder, PeakOfAnOrderMatchesTheBuffersOfTheReorderedGraph) {
  std::mt19937 rng(3);
  for (int round = 0; round < 5; ++round) {
    const TensorGraph graph = random_graph(rng, 6);
    for_each_order(graph, [&](const std::vector<int>& order) {
      EXPECT_EQ(resident_peak_bytes(graph, order),
                live_bytes_lower_bound(buffers_of(reorder(graph, order))));
    });
  }
}

TEST(OperatorOrder, ReorderRejectsOrdersAgainstADependency) {
  const TensorGraph graph = diamond_graph();
  EXPECT_THROW(reorder(graph, {1, 0, 2, 3, 4, 5, 6}), Error);
  EXPECT_THROW(reorder(graph, {0, 1, 2}), Error);
  EXPECT_NE(order_problem(graph, {0, 1, 2, 3, 5, 4, 6}), "");  // F before E
  const TensorGraph moved = reorder(graph, {0, 1, 3, 4, 2, 5, 6});
  EXPECT_EQ(moved.nodes[4].name, "C");
  EXPECT_EQ(live_bytes_lower_bound(buffers_of(moved)), 130);
}

TEST(OperatorOrderIlp, SimpleGraphKeepsItsOptimalOrder) {
  const OperatorOrder skipped = ilp_operator_order(simple_graph(), OrderIlpOptions{});
  EXPECT_EQ(skipped.outcome, OrderOutcome::AtLowerBound);
  EXPECT_EQ(skipped.peak_bytes, 70);
  EXPECT_NE(skipped.note.find("lower bound"), std::string::npos) << skipped.note;
  MADPIPE_SKIP_WITHOUT_BACKEND();
  const OperatorOrder solved = ilp_operator_order(simple_graph(), solve_always(2));
  EXPECT_EQ(solved.outcome, OrderOutcome::Reordered) << solved.note;
  EXPECT_EQ(solved.peak_bytes, 70);
  EXPECT_EQ(solved.solver_status, solver::Status::Optimal);
}

TEST(OperatorOrderIlp, DiamondFindsTheOrderOf130) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  const TensorGraph graph = diamond_graph();
  const OperatorOrder split = ilp_operator_order(graph, OrderIlpOptions{});
  EXPECT_EQ(split.peak_bytes, 130) << split.note;  // parts A, B, CDE, F, G: only CDE is solved
  EXPECT_EQ(names(graph, split.order), "ABDECFG");
  EXPECT_NE(split.note.find("5 parts in sequence: 1 ordered by the ilp (1 optimal)"),
            std::string::npos)
      << split.note;
  OrderIlpOptions whole;
  whole.horizon = 7;  // an explicit horizon solves the whole graph in one model
  const OperatorOrder order = ilp_operator_order(graph, whole);
  EXPECT_EQ(order.outcome, OrderOutcome::Reordered) << order.note;
  EXPECT_EQ(order.given_peak_bytes, 150);
  EXPECT_EQ(order.peak_bytes, 130);
  EXPECT_EQ(names(graph, order.order), "ABDECFG");
  EXPECT_EQ(order.execute_vars, 15);
  EXPECT_EQ(order.preserve_vars, 23);
  EXPECT_EQ(order.coexisting_pairs, 13);
  EXPECT_EQ(order.solver_status, solver::Status::Optimal);
}

// Horizon shrinking: on 6 timesteps for 7 nodes the ILP finds 150, not the optimum of 130.
TEST(OperatorOrderIlp, DiamondOnSixTimestepsMissesTheOptimum) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  OrderIlpOptions options = solve_always(2);
  options.horizon = 6;
  const OperatorOrder order = ilp_operator_order(diamond_graph(), options);
  EXPECT_EQ(order.peak_bytes, 150) << order.note;
}

TEST(LifetimeWindows, SequentialCutsSplitPartsThatRunOneAfterTheOther) {
  EXPECT_EQ(sequential_cuts(diamond_graph()), (std::vector<int>{1, 2, 5, 6}));  // A B {C D E} F G
  const TensorGraph simple = simple_graph();
  EXPECT_EQ(sequential_cuts(simple), (std::vector<int>{1, 2}));  // A B {C D E}
}

// Two diamonds, the second after the first through an order edge, with a tensor from the first
// used by the last node of the second: the parts are ordered one by one.
TEST(OperatorOrderIlp, PartsInSequenceAreSolvedOneByOne) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  std::vector<std::string> nodes;
  std::vector<TensorSpec> tensors;
  for (const std::string copy : {"1", "2"}) {
    for (const char* v : {"A", "B", "C", "D", "E", "F", "G"}) nodes.push_back(v + copy);
    for (const TensorSpec& t : diamond_graph_specs())
      tensors.push_back(
          {t.name + copy, t.size_bytes, t.producer + copy, {t.consumers.front() + copy}});
  }
  tensors.push_back({"long", 5, "A1", {"G2"}});
  TensorGraph graph = make_tensor_graph(nodes, tensors);
  graph.order_edges.push_back({6, 7});  // G1 -> A2
  const OperatorOrder order = ilp_operator_order(graph, OrderIlpOptions{});
  EXPECT_EQ(order.outcome, OrderOutcome::Reordered) << order.note;
  EXPECT_EQ(order.given_peak_bytes, 155);
  EXPECT_EQ(order.peak_bytes, 135);
  EXPECT_EQ(names(graph, order.order), "A1B1D1E1C1F1G1A2B2D2E2C2F2G2");
  EXPECT_NE(order.note.find("parts in sequence"), std::string::npos) << order.note;
}

TEST(OperatorOrderIlp, RandomGraphsMatchTheExhaustiveOracle) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  std::mt19937 rng(17);
  for (int round = 0; round < 5; ++round) {
    const TensorGraph graph = random_graph(rng, 7);
    std::int64_t best = INT64_MAX;
    for_each_order(graph, [&](const std::vector<int>& order) {
      best = std::min(best, resident_peak_bytes(graph, order));
    });
    const OperatorOrder order = ilp_operator_order(graph, solve_always(5));
    EXPECT_EQ(order_problem(graph, order.order), "");
    EXPECT_EQ(order.peak_bytes, best) << order.note;
    EXPECT_EQ(resident_peak_bytes(graph, order.order), order.peak_bytes);
  }
}

TEST(OperatorOrderIlp, StageOrderStaysInsideItsPipelineParts) {
  const Profile profile = read_profile(testing::shipped_profile_path("gpt2_small"));
  const remat::RematChain chain = remat::stage_remat_chain(profile, 1, 4);
  const TensorGraph store_all = stage_tensor_graph(chain, {}, 2);
  const OperatorOrder fixed = ilp_operator_order(store_all, OrderIlpOptions{});
  EXPECT_EQ(fixed.outcome, OrderOutcome::OnlyOrder) << fixed.note;  // every part is a chain

  MADPIPE_SKIP_WITHOUT_BACKEND();
  const remat::RematSequence sequence =
      parse_remat_sequence("F1ck F2all F3all F4ck Loss dLoss F4all B4 B3 B2 F1all B1", chain);
  const TensorGraph graph = stage_tensor_graph(chain, sequence, 2);
  const OperatorOrder order = ilp_operator_order(graph, solve_always(3));
  EXPECT_EQ(order_problem(graph, order.order), "");
  EXPECT_LE(order.peak_bytes, order.given_peak_bytes);
  EXPECT_EQ(order.outcome, OrderOutcome::Reordered) << order.note;
  EXPECT_EQ(order.solver_status, solver::Status::Optimal) << order.note;
  // The parts (forward of m0, m1, then backward of m0, m1) stay in their order.
  const int forward = micro_batch_tensor_graph(chain, sequence).forward_nodes;
  const int backward = static_cast<int>(graph.nodes.size()) / 2 - forward;
  auto part = [&](int node) {
    return node < 2 * forward ? node / forward : 2 + (node - 2 * forward) / backward;
  };
  for (std::size_t i = 0; i < order.order.size(); ++i)
    EXPECT_EQ(part(order.order[i]), part(static_cast<int>(i)))
        << graph.nodes[static_cast<std::size_t>(order.order[i])].name;
}

TEST(OperatorOrderIlp, TinyTimeLimitStillGivesAValidOrder) {
  MADPIPE_SKIP_WITHOUT_BACKEND();
  std::mt19937 rng(23);
  const TensorGraph graph = random_graph(rng, 24);
  OrderIlpOptions options = solve_always(0.01);
  const OperatorOrder order = ilp_operator_order(graph, options);
  EXPECT_EQ(order_problem(graph, order.order), "") << order.note;
  EXPECT_LE(order.peak_bytes, order.given_peak_bytes);
  EXPECT_EQ(resident_peak_bytes(graph, order.order), order.peak_bytes);
  options.backend = "nosuchsolver";
  EXPECT_THROW(ilp_operator_order(graph, options), Error);
}

}  // namespace
}  // namespace madpipe::arena
