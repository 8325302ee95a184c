#include "remat/rotor.hpp"

#include "core/error.hpp"
#include "remat/remat_sequence.hpp"
#include "support/remat_support.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

namespace madpipe::remat {
namespace {

using madpipe::testing::chain_of;
using madpipe::testing::small_integer_chain;

// C_MP with a budget in bytes, one byte per slot: exact for integer sizes.
double rotor_time(const RematChain& chain, std::int64_t budget) {
  const std::int64_t memory = budget - chain.a[0];
  if (memory < 0) return RotorTable::kInfinity;
  const RotorTable table(chain, 1, static_cast<int>(memory));
  return table.time(static_cast<int>(memory));
}

// Exhaustive search over all sequences of Table 2.1 ops (Dijkstra over memory states), persistent
// or not: a lower bound of the persistent DP.
double brute_force_time(const RematChain& chain, std::int64_t budget) {
  const int n = chain.length();
  using State = std::tuple<unsigned, unsigned, unsigned>;  // plain, recorded, gradient bits
  auto bytes = [&](const State& s) {
    std::int64_t total = 0;
    for (int k = 0; k <= n; ++k) {
      if (std::get<0>(s) >> k & 1) total += chain.a[k];
      if (std::get<1>(s) >> k & 1) total += chain.abar[k];
      if (std::get<2>(s) >> k & 1) total += chain.delta[k];
    }
    return total;
  };
  const State start{1u, 0u, 1u << n};
  std::map<State, double> best{{start, 0.0}};
  using Entry = std::pair<double, State>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  queue.push({0.0, start});
  while (!queue.empty()) {
    // Not a structured binding: C++17 does not let the lambda below capture one (clang refuses).
    const double time = queue.top().first;
    const State state = queue.top().second;
    queue.pop();
    if (time > best[state]) continue;
    const auto [plain, recorded, gradient] = state;
    if (plain == 0 && recorded == 0 && gradient == 1u) return time;
    const std::int64_t used = bytes(state);
    auto relax = [&](State next, double cost) {
      const double t = time + cost;
      auto it = best.find(next);
      if (it == best.end() || t < it->second) {
        best[next] = t;
        queue.push({t, next});
      }
    };
    for (int k = 1; k <= n; ++k) {
      const unsigned bit = 1u << k, input = 1u << (k - 1);
      const bool has_input = (plain | recorded) & input;
      if (has_input && used + chain.abar[k] + chain.forward_overhead[k] <= budget)
        relax({plain & ~bit, recorded | bit, gradient}, chain.forward_ms[k]);
      if (has_input && used + chain.a[k] + chain.forward_overhead[k] <= budget)
        relax({plain | bit, recorded, gradient}, chain.forward_ms[k]);
      if ((plain & input) && used + chain.a[k] + chain.forward_overhead[k] <= budget)
        relax({(plain | bit) & ~input, recorded, gradient}, chain.forward_ms[k]);
      if ((gradient & bit) && (recorded & bit) && has_input &&
          used + chain.delta[k - 1] + chain.backward_overhead[k] <= budget)
        relax({plain & ~input, recorded & ~bit, (gradient & ~bit) | input}, chain.backward_ms[k]);
    }
  }
  return RotorTable::kInfinity;
}

// Random chain of `stages` stages plus a free loss, sizes uniform in [1, max_size].
RematChain random_chain(unsigned seed, int stages, int max_size) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> size(1, max_size);
  std::uniform_real_distribution<double> ms(0.1, 3.0);
  RematChain chain = make_remat_chain(stages);
  chain.a[0] = chain.abar[0] = chain.delta[0] = size(rng);
  for (int k = 1; k <= stages; ++k) {
    chain.forward_ms[k] = ms(rng);
    chain.backward_ms[k] = 2 * ms(rng);
    chain.a[k] = chain.delta[k] = size(rng);
    chain.abar[k] = chain.a[k] + size(rng);
  }
  return chain;
}

// A small regression chain: 4 stages + loss, u_F = 1, u_B = 2, a = 1, abar = 2.
RematChain regression_chain() {
  return chain_of({1, 1, 1, 1, 0}, {2, 2, 2, 2, 0}, {1, 1, 1, 1, 1, 0}, {1, 2, 2, 2, 2, 0});
}

TEST(RematSequence, TextRoundTripsWithProfileLayerIndices) {
  RematChain chain = regression_chain();
  chain.first_layer = 10;
  const std::string text = "F10ck F11none F12all F13ck Loss dLoss B13 B12 F10all F11all B11 B10";
  const RematSequence sequence = parse_remat_sequence(text, chain);
  ASSERT_EQ(sequence.size(), 12u);
  EXPECT_EQ(sequence[0], (RematOp{RematOpKind::ForwardCheckpoint, 1}));
  EXPECT_EQ(sequence[4], (RematOp{RematOpKind::ForwardAll, 5}));
  EXPECT_EQ(to_string(sequence, chain), text);
  EXPECT_THROW(parse_remat_sequence("F9all", chain), Error);
  EXPECT_THROW(parse_remat_sequence("F10every", chain), Error);
}

TEST(RematSequence, ThesisExampleSequencesReplayAtLargeMemory) {
  const RematChain chain =
      chain_of({1, 2, 3, 4, 1}, {2, 3, 4, 5, 1}, {3, 2, 4, 1, 2, 0}, {3, 5, 6, 2, 4, 0});
  for (const char* text :
       {"F0ck F1none F2ck F3all Loss dLoss B3 F2all B2 F0all F1all B1 B0",
        "F0ck F1none F2ck F3ck Loss dLoss F3all B3 F2all B2 F0ck F1all B1 F0all B0",
        "F0ck F1none F2all F3ck Loss dLoss F3all B3 B2 F0all F1all B1 B0"}) {
    const SequenceReplay replay = replay_sequence(chain, parse_remat_sequence(text, chain));
    EXPECT_TRUE(replay.valid) << text << ": " << replay.problem;
    EXPECT_GT(replay.total_ms(), chain.sequential_ms()) << text;
  }
  const SequenceReplay all = replay_sequence(chain, store_all_sequence(chain));
  ASSERT_TRUE(all.valid);
  EXPECT_DOUBLE_EQ(all.total_ms(), chain.sequential_ms());
  EXPECT_EQ(all.stored_bytes, 3 + 5 + 6 + 2 + 4);
}

TEST(RematSequence, ReplayRejectsMissingInputsAndUnfinishedSequences) {
  const RematChain chain = regression_chain();
  SequenceReplay r = replay_sequence(chain, parse_remat_sequence("F0ck F1none F1all", chain));
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("F1all"), std::string::npos) << r.problem;  // a1 was freed by F1none
  r = replay_sequence(chain, parse_remat_sequence("F0none F1all", chain));
  EXPECT_FALSE(r.valid);
  r = replay_sequence(chain,
                      parse_remat_sequence("F0all F1all F2all F3all Loss dLoss B3 B2", chain));
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("does not end"), std::string::npos);
  r = replay_sequence(chain, parse_remat_sequence("F0ck F1ck F2ck F3ck Loss dLoss B3", chain));
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("not recorded"), std::string::npos);
}

TEST(Rotor, RegressionTableOfTimesPerBudget) {
  const RematChain chain = regression_chain();
  const std::map<int, double> expected{
      {5, RotorTable::kInfinity}, {6, 18}, {7, 15}, {8, 14}, {9, 14}, {10, 13}, {11, 12}, {14, 12}};
  for (const auto& [budget, time] : expected) {
    EXPECT_EQ(rotor_time(chain, budget), time) << "M = " << budget;
    const RematResult result = optimal_remat(chain, budget, budget);
    EXPECT_EQ(result.feasible, time < RotorTable::kInfinity) << "M = " << budget;
    if (!result.feasible) continue;
    EXPECT_DOUBLE_EQ(result.replay.total_ms(), time) << "M = " << budget;
    EXPECT_LE(result.replay.peak_bytes, budget) << "M = " << budget;
  }
}

TEST(Rotor, PersistenceCounterexampleCosts3nMinus2) {
  for (int n = 4; n <= 6; ++n) {
    const int stages = n + 2;
    std::vector<double> forward(stages + 1, 0.0), backward(stages + 1, 0.0);
    forward[0] = n - 2;
    forward[1] = 2;
    std::vector<std::int64_t> a(stages + 2, 3);
    a[0] = 0;
    a[1] = 1;
    a[stages] = 4;
    a[stages + 1] = 0;
    const RematChain chain = chain_of(forward, backward, a, a);
    EXPECT_EQ(rotor_time(chain, 15), 3 * n - 2) << "n = " << n;
    EXPECT_EQ(brute_force_time(chain, 15), 2 * n + 2) << "n = " << n;  // non-persistent optimum
  }
}

TEST(Rotor, RematNpHardnessInstances) {
  const std::vector<std::pair<std::vector<int>, double>> cases{{{1, 1, 2}, 16},    {{1, 2, 3}, 20},
                                                               {{2, 3, 5, 4}, 38}, {{1, 1, 4}, 22},
                                                               {{1, 2, 5}, 26},    {{3, 3, 4}, 29}};
  for (const auto& [x, expected] : cases) {
    const int n = static_cast<int>(x.size());
    int V = 0;
    for (int v : x) V += v;
    V /= 2;
    const int stages = 2 * n + 1;  // plus the loss
    std::vector<double> forward(stages + 1, 0.0), backward(stages + 1, 1.0);
    std::vector<std::int64_t> a(stages + 2, 0);
    for (int k = 1; k <= n; ++k) forward[2 * k - 2] = a[2 * k - 1] = x[k - 1];
    forward[2 * n] = a[2 * n + 1] = V;
    const RematChain chain = chain_of(forward, backward, a, a);
    EXPECT_EQ(rotor_time(chain, 3 * V), expected);
  }
}

// The persistent DP is exact among persistent sequences; a non-persistent one (dropping a saved
// input with F^none before its backward, thesis §2.3.1) is rarely better.
TEST(Rotor, MatchesExhaustiveSearchOnRandomChainsAndReplaysWithinBudget) {
  std::mt19937 rng(7);
  int compared = 0, feasible = 0, equal = 0;
  for (int instance = 0; instance < 60; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 4);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (std::int64_t budget = 4; budget <= all + 1; budget += 3) {
      const double dp = rotor_time(chain, budget);
      const double exact = brute_force_time(chain, budget);
      ++compared;
      EXPECT_GE(dp, exact) << "instance " << instance << ", budget " << budget;
      EXPECT_EQ(dp < RotorTable::kInfinity, exact < RotorTable::kInfinity)
          << "instance " << instance << ", budget " << budget;
      equal += dp == exact;
      if (dp >= RotorTable::kInfinity) continue;
      ++feasible;
      const RematResult result = optimal_remat(chain, budget, static_cast<int>(budget));
      ASSERT_TRUE(result.feasible);
      EXPECT_LE(result.replay.peak_bytes, budget);
      EXPECT_DOUBLE_EQ(result.replay.total_ms(), dp);
    }
    EXPECT_DOUBLE_EQ(rotor_time(chain, all), chain.sequential_ms());
  }
  EXPECT_GT(feasible, compared / 4);
  EXPECT_GE(equal, compared * 95 / 100) << equal << " of " << compared;
}

TEST(Rotor, TimeIsNonIncreasingInMemoryWithCoarseSlots) {
  const RematChain chain = random_chain(11, 20, 90000);
  const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
  double previous = RotorTable::kInfinity;
  for (int step = 1; step <= 20; ++step) {
    const std::int64_t budget = all * step / 20;
    const RematResult result = optimal_remat(chain, budget, 500);
    if (!result.feasible) continue;
    EXPECT_LE(result.replay.peak_bytes, budget);
    EXPECT_LE(result.replay.total_ms(), previous + 1e-9);
    previous = result.replay.total_ms();
  }
  // Sizes round up to whole slots, so storing everything needs a little more than its peak.
  EXPECT_DOUBLE_EQ(optimal_remat(chain, all * 11 / 10, 500).replay.total_ms(),
                   chain.sequential_ms());
}

TEST(PipelinedRemat, ChargesStoredMemoryOncePerMicroBatchInFlight) {
  const RematChain chain = regression_chain();
  for (std::int64_t budget = 6; budget <= 14; ++budget) {
    const RematResult one = optimal_pipelined_remat(chain, 1, budget, static_cast<int>(budget));
    EXPECT_EQ(one.feasible, rotor_time(chain, budget) < RotorTable::kInfinity);
    if (one.feasible) {
      EXPECT_DOUBLE_EQ(one.replay.total_ms(), rotor_time(chain, budget));
    }
  }
  double previous = RotorTable::kInfinity;
  for (std::int64_t budget = 10; budget <= 40; ++budget) {
    const RematResult three = optimal_pipelined_remat(chain, 3, budget, static_cast<int>(budget));
    if (!three.feasible) continue;
    const SequenceReplay& r = three.replay;
    EXPECT_LE(3 * r.stored_bytes + r.transient_bytes(), budget);
    EXPECT_LE(r.total_ms(), previous);
    previous = r.total_ms();
    const RematResult one = optimal_pipelined_remat(chain, 1, budget, static_cast<int>(budget));
    EXPECT_LE(one.replay.total_ms(), r.total_ms());
  }
  EXPECT_DOUBLE_EQ(previous, chain.sequential_ms());
}

TEST(PipelinedRemat, OptionsFormAParetoFrontStartingWithStoreAll) {
  const RematChain chain = regression_chain();
  const std::vector<RematOption> options = remat_options(chain, 40, 0);
  ASSERT_GE(options.size(), 3u);
  EXPECT_DOUBLE_EQ(options.front().backward_ms + options.front().forward_ms, chain.sequential_ms());
  for (std::size_t i = 0; i < options.size(); ++i) {
    const SequenceReplay r = replay_sequence(chain, options[i].sequence);
    ASSERT_TRUE(r.valid);
    EXPECT_EQ(r.stored_bytes, options[i].stored_bytes);
    EXPECT_DOUBLE_EQ(r.backward_ms, options[i].backward_ms);
    for (std::size_t j = 0; j < options.size(); ++j) {
      if (i == j) continue;
      const bool dominated = options[j].backward_ms <= options[i].backward_ms &&
                             options[j].stored_bytes <= options[i].stored_bytes &&
                             options[j].transient_bytes <= options[i].transient_bytes;
      EXPECT_FALSE(dominated) << i << " dominated by " << j;
    }
  }
  // With slot = 1 byte and all thresholds, the front holds the exact pipelined optimum.
  for (int nca = 1; nca <= 4; ++nca)
    for (std::int64_t budget = 8; budget <= 40; budget += 4) {
      const RematResult best =
          optimal_pipelined_remat(chain, nca, budget, static_cast<int>(budget));
      double front = RotorTable::kInfinity;
      for (const RematOption& o : options)
        if (nca * o.stored_bytes + o.transient_bytes <= budget)
          front = std::min(front, o.backward_ms + o.forward_ms);
      EXPECT_EQ(best.feasible ? best.replay.total_ms() : RotorTable::kInfinity, front)
          << "nca " << nca << ", budget " << budget;
    }
}

TEST(Rotor, NeverSlowerThanSequentialCheckpointingAtItsMemory) {
  const RematChain chain = random_chain(5, 16, 60);
  for (int segments = 1; segments <= 8; ++segments) {
    const RematSequence sequence = sequential_checkpoint_sequence(chain, segments);
    const SequenceReplay baseline = replay_sequence(chain, sequence);
    ASSERT_TRUE(baseline.valid) << segments << ": " << baseline.problem;
    if (segments == 1) {
      EXPECT_DOUBLE_EQ(baseline.total_ms(), chain.sequential_ms());
    }
    // Exact sizes (one byte per slot) make ROTOR optimal at that memory.
    const RematResult rotor = optimal_remat(chain, baseline.peak_bytes,
                                            static_cast<int>(baseline.peak_bytes - chain.a[0]));
    ASSERT_TRUE(rotor.feasible);
    EXPECT_LE(rotor.replay.total_ms(), baseline.total_ms() + 1e-9) << segments << " segments";
  }
}
}  // namespace
}  // namespace madpipe::remat
