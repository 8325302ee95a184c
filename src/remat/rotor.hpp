#pragma once

#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace madpipe::remat {

// The persistent rematerialization DP of ROTOR (thesis ch. 2, Algorithms 3 and 4) on a chain
// whose sizes are rounded up to whole memory slots: C(s, t, m) for every sub-chain and every m in
// 0..slots, m excluding a[0]. Rounding up makes every sequence it returns fit the real budget.
class RotorTable {
 public:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  // slot_bytes > 0; tables hold (slots + 1) * n^2 / 2 entries.
  RotorTable(const RematChain& chain, std::int64_t slot_bytes, int slots);

  int slots() const noexcept { return slots_; }
  std::int64_t slot_bytes() const noexcept { return slot_bytes_; }
  // Slots needed for `bytes`, rounded up.
  int to_slots(std::int64_t bytes) const noexcept;

  // Optimal time of the whole chain with `memory` slots beyond a[0]; kInfinity when nothing fits.
  double time(int memory) const;
  // The optimal sequence (Algorithm 4); empty when time(memory) is infinite.
  RematSequence sequence(int memory) const;

  // Pipeline variant: forbids sequences that keep more than `memory - threshold` slots beyond a[0]
  // between the end of the forward (the loss) and the backward, by requiring at least
  // `threshold` free slots when the loss runs. Recomputes the cells ending at the loss;
  // threshold 0 is the plain DP.
  void set_loss_threshold(int threshold);

 private:
  std::size_t cell(int s, int t) const noexcept;
  float& value(int m, int s, int t) {
    return values_[static_cast<std::size_t>(m) * cells_ + cell(s, t)];
  }
  float value(int m, int s, int t) const {
    return values_[static_cast<std::size_t>(m) * cells_ + cell(s, t)];
  }
  void compute(int m, int s, int t);
  void append_sequence(int s, int t, int m, RematSequence& out) const;

  const RematChain& chain_;
  std::int64_t slot_bytes_;
  int slots_;
  int n_;  // chain length, loss included
  int threshold_ = 0;
  std::size_t cells_;
  std::vector<int> a_, abar_, delta_, overhead_f_, overhead_b_;
  std::vector<int> chain_limit_;      // m_all(s, t), per cell
  std::vector<float> values_;         // [m][cell]
  std::vector<std::int16_t> choice_;  // [m][cell]: -1 F^all first, s' >= s leaf, -2 none
};

// Optimal sequence for a chain and a memory budget in bytes (a[0] included), with the budget cut
// into `slots` slots. The times and memory are the exact replay of the sequence.
struct RematResult {
  bool feasible = false;
  RematSequence sequence;
  SequenceReplay replay;
};
RematResult optimal_remat(const RematChain& chain, std::int64_t budget_bytes, int slots = 500);

// In a pipeline the memory a stage keeps from its forward is held once per micro-batch in flight
// (NCA). Best sequence such that nca * stored + transient <= budget_bytes, where stored is what
// the sequence holds between its loss forward and its loss backward and transient its peak above
// that. `threshold_steps` values of the free memory at the loss are tried (0: all slots, exact in
// the discretized model).
RematResult optimal_pipelined_remat(const RematChain& chain, int nca, std::int64_t budget_bytes,
                                    int slots = 500, int threshold_steps = 0);

// The baseline of thesis §2.1.2 (checkpoint_sequential): the chain cut into `segments` segments
// of about equal length; the forward keeps each segment's input, the backward recomputes a
// segment with F^all before its backwards; the last segment (with the loss) is not recomputed.
RematSequence sequential_checkpoint_sequence(const RematChain& chain, int segments);

// One way to run a pipeline stage: its effective times and memory (exact replay).
struct RematOption {
  double forward_ms = 0;
  double backward_ms = 0;            // recomputations included
  std::int64_t stored_bytes = 0;     // per micro-batch in flight
  std::int64_t transient_bytes = 0;  // above stored, during its own ops
  RematSequence sequence;

  double total_ms() const noexcept { return forward_ms + backward_ms; }
};

// Adds `option` to a Pareto front of (total_ms, stored_bytes, transient_bytes) unless an option
// there is at least as good on all three; drops the options it beats.
void add_to_front(std::vector<RematOption>& front, RematOption option);
// Fastest first, then least stored, then least transient.
void sort_fastest_first(std::vector<RematOption>& front);

// Pareto front of (backward_ms, stored_bytes, transient_bytes) over the sequences the pipeline
// variant finds, with memory cut into `slots` slots of the store-all peak and `threshold_steps`
// loss thresholds; fastest first. The first option stores everything.
std::vector<RematOption> remat_options(const RematChain& chain, int slots = 200,
                                       int threshold_steps = 24);

// The sequence with the least peak memory that remat_options() with the same `slots` finds (the
// smallest memory of its threshold-0 table), without building the whole front: one table, one
// replay. nullopt when it keeps no less than storing everything (nothing to gain).
// remat_options() holds it or an option that keeps no more, whatever `threshold_steps`.
std::optional<RematOption> least_memory_option(const RematChain& chain, int slots = 200);

}  // namespace madpipe::remat
