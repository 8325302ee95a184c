#include "remat/pofo.hpp"

#include "core/error.hpp"
#include "remat/offload_replay.hpp"
#include "remat/remat_sequence.hpp"
#include "remat/rotor.hpp"
#include "support/remat_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace madpipe::remat {
namespace {

using madpipe::testing::chain_of;
using madpipe::testing::small_integer_chain;

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ROTOR's persistent DP with one byte per slot: exact for integer sizes.
double rotor_time(const RematChain& chain, std::int64_t budget) {
  const std::int64_t memory = budget - chain.a[0];
  if (memory < 0) return kInf;
  const RotorTable table(chain, 1, static_cast<int>(memory));
  return table.time(static_cast<int>(memory));
}

// pofo with one byte per step.
OffloadResult pofo(const RematChain& chain, std::int64_t budget, double beta) {
  return optimal_offload_remat(chain, budget, beta, static_cast<int>(budget));
}

double time_of(const OffloadResult& result) { return result.feasible ? result.predicted_ms : kInf; }

int count(const RematSequence& sequence, RematOpKind kind) {
  return static_cast<int>(std::count_if(sequence.begin(), sequence.end(),
                                        [&](const RematOp& op) { return op.kind == kind; }));
}

// Every sequence of pofo's class (thesis Assumptions 4): persistent, each stage input kept or
// offloaded right after the forward that reads it, prefetches right after the loss.
struct Candidate {
  RematSequence forward, backward;
  std::vector<int> offloaded;
};

std::vector<RematSequence> all_segments(int s, int t) {
  std::vector<RematSequence> out;
  if (s == t) return {{{RematOpKind::ForwardAll, s}, {RematOpKind::Backward, s}}};
  for (const RematSequence& inner : all_segments(s + 1, t)) {
    RematSequence seq{{RematOpKind::ForwardAll, s}};
    seq.insert(seq.end(), inner.begin(), inner.end());
    seq.push_back({RematOpKind::Backward, s});
    out.push_back(seq);
  }
  for (int sp = s; sp < t; ++sp)
    for (const RematSequence& rest : all_segments(sp + 1, t))
      for (const RematSequence& redo : all_segments(s, sp)) {
        RematSequence seq{{RematOpKind::ForwardCheckpoint, s}};
        for (int k = s + 1; k <= sp; ++k) seq.push_back({RematOpKind::ForwardNone, k});
        seq.insert(seq.end(), rest.begin(), rest.end());
        seq.insert(seq.end(), redo.begin(), redo.end());
        out.push_back(seq);
      }
  return out;
}

std::vector<Candidate> all_candidates(int s, int n) {
  if (s == n) return {{{{RematOpKind::ForwardAll, n}}, {{RematOpKind::Backward, n}}, {}}};
  std::vector<Candidate> out;
  // t = s - 1: F_s^all, then B_s closes stage s; t >= s: F_s^ck .. F_t^none, s..t redone later.
  for (int t = s - 1; t < n; ++t) {
    const bool all = t < s;
    const std::vector<RematSequence> redos =
        all ? std::vector<RematSequence>{{{RematOpKind::Backward, s}}} : all_segments(s, t);
    for (const Candidate& next : all_candidates(all ? s + 1 : t + 1, n))
      for (const RematSequence& redo : redos)
        for (bool offload : {false, true}) {
          Candidate c;
          c.forward.push_back({all ? RematOpKind::ForwardAll : RematOpKind::ForwardCheckpoint, s});
          if (offload) {
            c.forward.push_back({RematOpKind::Offload, s});
            c.offloaded.push_back(s);
          }
          for (int k = s + 1; k <= t; ++k) c.forward.push_back({RematOpKind::ForwardNone, k});
          c.forward.insert(c.forward.end(), next.forward.begin(), next.forward.end());
          c.backward = next.backward;
          c.backward.insert(c.backward.end(), redo.begin(), redo.end());
          c.offloaded.insert(c.offloaded.end(), next.offloaded.begin(), next.offloaded.end());
          out.push_back(c);
        }
  }
  return out;
}

// Best replayed time over pofo's whole class of sequences.
double exhaustive_time(const RematChain& chain, std::int64_t budget, double beta) {
  double best = kInf;
  for (const Candidate& c : all_candidates(1, chain.length())) {
    RematSequence seq = c.forward;
    std::vector<int> offloaded = c.offloaded;
    std::sort(offloaded.rbegin(), offloaded.rend());
    for (int s : offloaded) seq.push_back({RematOpKind::Prefetch, s});
    seq.insert(seq.end(), c.backward.begin(), c.backward.end());
    const OffloadReplay r = replay_offload_sequence(chain, seq, budget, beta);
    if (r.valid) best = std::min(best, r.total_ms);
  }
  return best;
}

// What every returned sequence must satisfy.
void expect_consistent(const OffloadResult& result, std::int64_t budget, const std::string& where) {
  ASSERT_TRUE(result.replay.valid) << where << ": " << result.replay.problem;
  EXPECT_LE(result.replay.peak_bytes, budget) << where;
  EXPECT_LE(result.replay.total_ms, result.predicted_ms * (1 + 1e-9) + 1e-9) << where;
  EXPECT_EQ(count(result.sequence, RematOpKind::Offload),
            count(result.sequence, RematOpKind::Prefetch))
      << where;
}

// 2 stages + loss for the hand-checked replays: stage 2 records 6 bytes and a_1 = a_2 = 0, so the
// memory is a_0 (4 bytes) next to abar_1 (3) and abar_2 (6); delta_0 = 0.
RematChain three_stage_chain() {
  RematChain chain = chain_of({2, 3, 0}, {4, 5, 0}, {4, 0, 0, 0}, {4, 3, 6, 0});
  chain.delta[0] = 0;
  return chain;
}

TEST(OffloadReplay, HandMadeChainWaitsForTheOffloadAndThePrefetch) {
  const RematChain chain = three_stage_chain();
  const RematSequence sequence = parse_remat_sequence("F0all O0 F1all Loss P0 dLoss B1 B0", chain);
  // Unbounded: the offload of a_0 runs during F0 and F1 ([0, 4] at 1 byte/ms), the prefetch
  // during B1, ending when B0 starts: no idle at all.
  OffloadReplay r = replay_offload_sequence(chain, sequence, kUnbounded, 1.0);
  ASSERT_TRUE(r.valid) << r.problem;
  EXPECT_DOUBLE_EQ(r.total_ms, chain.sequential_ms());
  EXPECT_DOUBLE_EQ(r.forward_ms, 5);
  EXPECT_DOUBLE_EQ(r.idle_ms, 0);
  EXPECT_EQ(r.offloaded_bytes, 4);
  EXPECT_EQ(r.stored_bytes, 3 + 6);
  // F1 starts at 2 with half of a_0 sent; all of a_0 is back when B1 ends.
  EXPECT_EQ(r.peak_bytes, 4 + 3 + 6);
  EXPECT_EQ(r.peak_bytes_release_at_completion, 4 + 3 + 6);

  // Budget 10: F1 waits 1 ms until 3 of a_0's 4 bytes are sent. B1 holds abar_1 + abar_2 = 9,
  // so the prefetch may have brought 1 byte by its end: B1 ends 3 ms before B0 starts.
  r = replay_offload_sequence(chain, sequence, 10, 1.0);
  ASSERT_TRUE(r.valid) << r.problem;
  EXPECT_DOUBLE_EQ(r.forward_ms, 6);  // F0 [0,2], idle, F1 [3,6], Loss
  EXPECT_DOUBLE_EQ(r.total_ms, 18);   // dLoss, B1 [6,11], idle [11,14], B0 [14,18]
  EXPECT_DOUBLE_EQ(r.backward_ms, 12);
  EXPECT_DOUBLE_EQ(r.idle_ms, 4);
  EXPECT_EQ(r.peak_bytes, 10);
  EXPECT_EQ(r.peak_bytes_release_at_completion, 13);

  // The same without the offload needs 13 bytes.
  const RematSequence plain = parse_remat_sequence("F0all F1all Loss dLoss B1 B0", chain);
  EXPECT_EQ(replay_offload_sequence(chain, plain, kUnbounded, 1.0).peak_bytes, 13);
  EXPECT_FALSE(replay_offload_sequence(chain, plain, 10, 1.0).valid);
  // F1 holds abar_1 and abar_2: 9 bytes whatever the link does.
  const OffloadReplay tight = replay_offload_sequence(chain, sequence, 8, 1.0);
  EXPECT_FALSE(tight.valid);
  EXPECT_NE(tight.problem.find("F1all"), std::string::npos) << tight.problem;
}

TEST(OffloadReplay, PrefetchesBeforeTheLossBackwardWhenTheBackwardIsShort) {
  // Slow link (0.5 byte/ms): offloading a_0 takes 8 ms, bringing it back 8 ms more. The forward
  // lasts 5 ms and B1 5 ms, so the loss backward waits for the offload (until 8), then for 3 ms
  // of prefetch (the other 5 ms overlap B1).
  const RematChain chain = three_stage_chain();
  const RematSequence sequence = parse_remat_sequence("F0all O0 F1all Loss P0 dLoss B1 B0", chain);
  const OffloadReplay r = replay_offload_sequence(chain, sequence, kUnbounded, 0.5);
  ASSERT_TRUE(r.valid) << r.problem;
  EXPECT_DOUBLE_EQ(r.forward_ms, 5);
  EXPECT_DOUBLE_EQ(r.total_ms, 8 + 3 + 5 + 4);
  EXPECT_DOUBLE_EQ(r.idle_ms, 6);
}

TEST(OffloadReplay, AgreesWithReplaySequenceWithoutTransfers) {
  std::mt19937 rng(3);
  int compared = 0;
  for (int instance = 0; instance < 40; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 5);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (std::int64_t budget = all; budget >= all / 2; budget -= 2) {
      const RematResult remat = optimal_remat(chain, budget, static_cast<int>(budget));
      if (!remat.feasible) continue;
      for (std::int64_t limit : {kUnbounded, remat.replay.peak_bytes}) {
        const OffloadReplay r = replay_offload_sequence(chain, remat.sequence, limit, 1.0);
        ASSERT_TRUE(r.valid) << r.problem;
        EXPECT_DOUBLE_EQ(r.forward_ms, remat.replay.forward_ms);
        EXPECT_DOUBLE_EQ(r.backward_ms, remat.replay.backward_ms);
        EXPECT_DOUBLE_EQ(r.total_ms, remat.replay.total_ms());
        EXPECT_DOUBLE_EQ(r.idle_ms, 0);
        EXPECT_EQ(r.peak_bytes, remat.replay.peak_bytes);
        EXPECT_EQ(r.peak_bytes_release_at_completion, remat.replay.peak_bytes);
        EXPECT_EQ(r.stored_bytes, remat.replay.stored_bytes);
        EXPECT_EQ(r.offloaded_bytes, 0);
      }
      ++compared;
      // One byte less than its peak: nothing can free memory, so the replay is invalid.
      EXPECT_FALSE(
          replay_offload_sequence(chain, remat.sequence, remat.replay.peak_bytes - 1, 1.0).valid);
    }
  }
  EXPECT_GT(compared, 40);
}

TEST(OffloadReplay, RejectsMisplacedOrMissingTransfers) {
  const RematChain chain = three_stage_chain();
  const auto replay = [&](const char* text, double beta = 1.0) {
    return replay_offload_sequence(chain, parse_remat_sequence(text, chain), kUnbounded, beta);
  };
  OffloadReplay r = replay("F0all O0 F1all Loss dLoss B1 B0");
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("on the host"), std::string::npos) << r.problem;
  r = replay("F0all F1all Loss O1 dLoss B1 B0");
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("O1"), std::string::npos) << r.problem;
  r = replay("F0all O0 P0 F1all Loss dLoss B1 B0");
  EXPECT_FALSE(r.valid);
  EXPECT_NE(r.problem.find("P0"), std::string::npos) << r.problem;
  r = replay("F0all F1all Loss P0 dLoss B1 B0");
  EXPECT_FALSE(r.valid);  // nothing offloaded
  r = replay("F0all O0 F1all Loss P0 dLoss B1 B0", 0.0);
  EXPECT_FALSE(r.valid);  // no link
  r = replay("F0all O0 F1all Loss P0 dLoss B1 B0");
  EXPECT_TRUE(r.valid) << r.problem;
}

TEST(OffloadReplay, CheckpointedInputOffloadedAndRecomputedAfterItsPrefetch) {
  // F0ck keeps a_0 and sends it away; the recomputation F0all reads it back.
  const RematChain chain = chain_of({1, 1, 0}, {1, 1, 0}, {2, 1, 1, 0}, {2, 3, 3, 0});
  const RematSequence sequence =
      parse_remat_sequence("F0ck O0 F1all Loss P0 dLoss B1 F0all B0", chain);
  const OffloadReplay r = replay_offload_sequence(chain, sequence, kUnbounded, 2.0);
  ASSERT_TRUE(r.valid) << r.problem;
  EXPECT_DOUBLE_EQ(r.total_ms, chain.sequential_ms() + 1);  // F0 runs twice, the link keeps up
  EXPECT_DOUBLE_EQ(r.idle_ms, 0);
  EXPECT_EQ(r.stored_bytes, 1 + 3);  // a_1 and abar_2
}

TEST(Pofo, HandMadeChainRecomputesThenOffloads) {
  // Sequential 14 ms needs 13 bytes. Down to 10, F0 is recomputed instead of keeping abar_1
  // (16 ms, better than the hand-made offload above). Below, a_0 (kept by F0ck) also goes to the
  // host; B1 then waits for memory as in the hand-made replay: 1 ms at 9 bytes, 2 at 8, and at
  // 7 F1 also waits 1 ms for the offload.
  const RematChain chain = three_stage_chain();
  const std::vector<std::pair<std::int64_t, double>> expected{
      {13, 14}, {10, 16}, {9, 17}, {8, 18}, {7, 20}};
  for (const auto& [budget, time] : expected) {
    const OffloadResult result = pofo(chain, budget, 1.0);
    ASSERT_TRUE(result.feasible) << budget;
    expect_consistent(result, budget, "budget " + std::to_string(budget));
    EXPECT_DOUBLE_EQ(result.predicted_ms, time) << budget;
    EXPECT_DOUBLE_EQ(result.replay.total_ms, time) << budget;
    EXPECT_EQ(result.replay.offloaded_bytes, budget < 10 ? 4 : 0) << budget;
    EXPECT_EQ(count(result.sequence, RematOpKind::ForwardCheckpoint), budget < 13 ? 1 : 0);
  }
  EXPECT_DOUBLE_EQ(rotor_time(chain, 10), 16);
  EXPECT_EQ(rotor_time(chain, 9), kInf);
  EXPECT_FALSE(pofo(chain, 6, 1.0).feasible);  // F1 needs abar_2 = 6 and B0 abar_1 next to a_0
}

TEST(Pofo, EqualsRotorWhenTheLinkVanishes) {
  std::mt19937 rng(5);
  int compared = 0, rescued = 0;
  for (int instance = 0; instance < 40; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 4);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (std::int64_t budget = 4; budget <= all + 1; budget += 2) {
      const double remat = rotor_time(chain, budget);
      const OffloadResult result = pofo(chain, budget, 1e-9);
      if (remat < kInf) {
        ++compared;
        ASSERT_TRUE(result.feasible) << "instance " << instance << ", budget " << budget;
        EXPECT_DOUBLE_EQ(result.predicted_ms, remat)
            << "instance " << instance << ", budget " << budget;
        EXPECT_DOUBLE_EQ(result.replay.total_ms,
                         optimal_remat(chain, budget, static_cast<int>(budget)).replay.total_ms());
        EXPECT_EQ(count(result.sequence, RematOpKind::Offload), 0);
      } else if (result.feasible) {
        ++rescued;
        EXPECT_GT(result.predicted_ms, 1e8);  // offloading a byte costs 1e9 ms
      }
      if (result.feasible) expect_consistent(result, budget, "budget " + std::to_string(budget));
    }
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(rescued, 0);
}

TEST(Pofo, NeverWorseThanRematOnlyAndNonIncreasingInBandwidth) {
  std::mt19937 rng(9);
  int improved = 0, cases = 0;
  for (int instance = 0; instance < 25; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 5);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (std::int64_t budget = all / 3; budget <= all; budget += 3) {
      const double remat = rotor_time(chain, budget);
      double previous = kInf;
      for (double beta : {0.25, 0.5, 1.0, 2.0, 4.0, 8.0}) {
        const OffloadResult result = pofo(chain, budget, beta);
        const double time = time_of(result);
        ++cases;
        EXPECT_LE(time, remat) << "instance " << instance << ", budget " << budget;
        EXPECT_LE(time, previous) << "instance " << instance << ", budget " << budget << ", beta "
                                  << beta;
        previous = time;
        improved += time < remat;
        if (!result.feasible) continue;
        EXPECT_GE(result.predicted_ms, chain.sequential_ms() - 1e-9);
        expect_consistent(result, budget, "budget " + std::to_string(budget));
        // Integer sizes, times and bandwidths: the discretization is exact.
        if (beta >= 1) {
          EXPECT_NEAR(result.replay.total_ms, result.predicted_ms, 1e-6 * result.predicted_ms)
              << "instance " << instance << ", budget " << budget << ", beta " << beta << ": "
              << to_string(result.sequence, chain);
        }
      }
    }
  }
  EXPECT_GT(improved, cases / 10);
}

TEST(Pofo, NonIncreasingInBudgetAndOffloadOnlyIsNoBetter) {
  std::mt19937 rng(13);
  int offload_only_feasible = 0;
  for (int instance = 0; instance < 25; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 5);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (double beta : {0.5, 3.0}) {
      double previous = kInf;
      for (std::int64_t budget = all / 3; budget <= all + 2; ++budget) {
        const OffloadResult both = pofo(chain, budget, beta);
        const OffloadResult only =
            optimal_offload_only(chain, budget, beta, static_cast<int>(budget));
        EXPECT_LE(time_of(both), previous) << "instance " << instance << ", budget " << budget;
        previous = time_of(both);
        EXPECT_GE(time_of(only), time_of(both)) << "instance " << instance << ", budget " << budget;
        if (!only.feasible) continue;
        ++offload_only_feasible;
        expect_consistent(only, budget, "offload only, budget " + std::to_string(budget));
        EXPECT_EQ(count(only.sequence, RematOpKind::ForwardCheckpoint), 0);
        EXPECT_EQ(count(only.sequence, RematOpKind::ForwardNone), 0);
        EXPECT_EQ(count(only.sequence, RematOpKind::ForwardAll), chain.length());
        if (beta >= 1) {
          EXPECT_NEAR(only.replay.total_ms, only.predicted_ms, 1e-6 * only.predicted_ms);
        }
      }
      EXPECT_DOUBLE_EQ(previous, chain.sequential_ms());
    }
  }
  EXPECT_GT(offload_only_feasible, 100);
}

TEST(Pofo, AmpleMemoryGivesTheSequentialTimeWithoutOffloads) {
  std::mt19937 rng(17);
  for (int instance = 0; instance < 20; ++instance) {
    const RematChain chain = small_integer_chain(rng, 3, 8);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (const OffloadResult& result :
         {pofo(chain, all, 2.0), optimal_offload_only(chain, all, 2.0, static_cast<int>(all)),
          optimal_offload_remat(chain, 4 * all, 1e3, 50)}) {
      ASSERT_TRUE(result.feasible);
      EXPECT_DOUBLE_EQ(result.predicted_ms, chain.sequential_ms());
      EXPECT_DOUBLE_EQ(result.replay.total_ms, chain.sequential_ms());
      EXPECT_EQ(result.replay.offloaded_bytes, 0);
      EXPECT_EQ(result.sequence, store_all_sequence(chain));
    }
  }
}

TEST(Pofo, RealSizedChainReplaysWithinBudgetAndPrediction) {
  // Sizes in bytes, times in ms and a link of 12 or 36 GB/s: 50 steps do not discretize
  // exactly, so the prediction is an upper bound of the replay.
  std::mt19937 rng(21);
  std::uniform_int_distribution<std::int64_t> size(1 << 20, 64 << 20);
  std::uniform_real_distribution<double> ms(0.2, 3.0);
  const int stages = 24;
  RematChain chain = make_remat_chain(stages);
  chain.a[0] = chain.abar[0] = chain.delta[0] = size(rng);
  for (int k = 1; k <= stages + 1; ++k) {
    const bool loss = k == stages + 1;
    chain.forward_ms[k] = loss ? 0 : ms(rng);
    chain.backward_ms[k] = loss ? 0 : 2 * ms(rng);
    chain.a[k] = chain.delta[k] = loss ? 0 : size(rng);
    chain.abar[k] = chain.a[k] + (loss ? 0 : 2 * size(rng));
    chain.forward_overhead[k] = loss ? 0 : size(rng) / 4;
    chain.backward_overhead[k] = loss ? 0 : size(rng) / 4;
  }
  const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
  int feasible = 0, offloading = 0;
  for (int fraction = 2; fraction <= 10; ++fraction) {
    const std::int64_t budget = all * fraction / 10;
    double previous = time_of(optimal_offload_remat(chain, budget, 1e-9));  // remat only
    for (double beta : {12e6, 36e6}) {
      const OffloadResult result = optimal_offload_remat(chain, budget, beta);
      EXPECT_LE(time_of(result), previous) << "budget " << budget << ", beta " << beta;
      previous = time_of(result);
      if (!result.feasible) continue;
      ++feasible;
      offloading += result.replay.offloaded_bytes > 0;
      expect_consistent(result, budget, "budget " + std::to_string(budget));
      EXPECT_GE(result.replay.total_ms, chain.sequential_ms() - 1e-9);
    }
  }
  EXPECT_GE(feasible, 12);
  EXPECT_GT(offloading, 0);
}

// The OFF_comm reduction of thesis Thm 9 (2-Partition of x, sum 2V): stages 1..n free with
// inputs abar_{i-1} = x_i, stage n+1 takes 1 ms each way, the loss input is V, the budget 2V and
// the link V bytes/ms, so offloading exactly V bytes during F_{n+1} and bringing them back
// during B_{n+1} gives makespan 2; without such a subset it is longer.
TEST(Pofo, OffloadOnlySolvesThePartitionInstance) {
  const std::vector<std::pair<std::vector<std::int64_t>, bool>> cases{
      {{1, 1, 2}, true},  {{1, 2, 3}, true},  {{2, 3, 5, 4}, true},
      {{1, 1, 4}, false}, {{1, 2, 5}, false}, {{3, 3, 4}, false}};
  for (const auto& [x, yes] : cases) {
    const int n = static_cast<int>(x.size());
    std::int64_t v = 0;
    for (std::int64_t value : x) v += value;
    v /= 2;
    RematChain chain = make_remat_chain(n + 2);  // stages 1..n+2, the loss n+3
    for (int i = 1; i <= n; ++i) chain.abar[i - 1] = chain.a[i - 1] = x[i - 1];
    chain.abar[n + 2] = chain.a[n + 2] = v;
    chain.forward_ms[n + 1] = chain.backward_ms[n + 1] = 1;
    const OffloadResult only =
        optimal_offload_only(chain, 2 * v, static_cast<double>(v), static_cast<int>(2 * v));
    ASSERT_TRUE(only.feasible);
    expect_consistent(only, 2 * v, "offload only");
    EXPECT_NEAR(only.replay.total_ms, only.predicted_ms, 1e-9);
    if (yes) {
      EXPECT_DOUBLE_EQ(only.predicted_ms, 2);
      EXPECT_EQ(only.replay.offloaded_bytes, v);
    } else {
      EXPECT_GT(only.predicted_ms, 2 + 1e-9);
    }
    // Free forwards make recomputation free: pofo needs no offload at all.
    const OffloadResult both = pofo(chain, 2 * v, static_cast<double>(v));
    EXPECT_DOUBLE_EQ(both.predicted_ms, 2);
  }
}

// The DP against every sequence of its class, timed by the replay: equal when the
// discretization is exact (integer sizes, times and bandwidth, one byte per step), an upper bound
// otherwise (0.5 byte/ms: what the link moves during an op rounds down).
TEST(Pofo, MatchesExhaustiveSearchOverItsClassOnSmallChains) {
  std::mt19937 rng(23);
  int compared = 0, equal = 0, offloading = 0;
  for (int instance = 0; instance < 60; ++instance) {
    const RematChain chain = small_integer_chain(rng, 2, 4);
    const std::int64_t all = replay_sequence(chain, store_all_sequence(chain)).peak_bytes;
    for (std::int64_t budget = all / 2; budget <= all; budget += 2)
      for (double beta : {1.0, 3.0, 0.5}) {
        const double exact = exhaustive_time(chain, budget, beta);
        const OffloadResult result = pofo(chain, budget, beta);
        const std::string where = "instance " + std::to_string(instance) + ", budget " +
                                  std::to_string(budget) + ", beta " + std::to_string(beta);
        ASSERT_EQ(result.feasible, exact < kInf) << where;
        if (!result.feasible) continue;
        EXPECT_GE(result.predicted_ms, exact - 1e-9) << where;
        offloading += result.replay.offloaded_bytes > 0;
        if (beta < 1) continue;
        ++compared;
        EXPECT_NEAR(result.predicted_ms, exact, 1e-9) << where;
        equal += std::abs(result.predicted_ms - exact) <= 1e-9;
      }
  }
  EXPECT_GT(compared, 300);
  EXPECT_EQ(equal, compared);
  EXPECT_GT(offloading, 50);
}

TEST(Pofo, RejectsBadArguments) {
  const RematChain chain = three_stage_chain();
  EXPECT_THROW(optimal_offload_remat(chain, 100, 1.0, 0), Error);
  EXPECT_THROW(optimal_offload_remat(chain, 100, -1.0), Error);
  const OffloadResult none = optimal_offload_remat(chain, 0, 1.0);
  EXPECT_FALSE(none.feasible);
  EXPECT_EQ(none.predicted_ms, kInf);
  // No link: pofo is ROTOR.
  for (std::int64_t budget = 6; budget <= 14; ++budget)
    EXPECT_EQ(time_of(pofo(chain, budget, 0.0)), rotor_time(chain, budget)) << budget;
}

}  // namespace
}  // namespace madpipe::remat
