#include "remat/rotor.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

using madpipe::remat::RematOpKind;

madpipe::remat::RotorTable::RotorTable(const RematChain& chain, std::int64_t slot_bytes, int slots)
    : chain_(chain),
      slot_bytes_(std::max<std::int64_t>(1, slot_bytes)),
      slots_(slots),
      n_(chain.length()) {
  if (slots < 0 || n_ < 1 || n_ > 32000)
    throw Error(ErrorKind::Internal, "", "", "RotorTable: bad chain length or slot count");
  cells_ = static_cast<std::size_t>(n_) * (n_ + 1) / 2;
  const auto sizes = [&](const std::vector<std::int64_t>& bytes) {
    std::vector<int> out(bytes.size());
    for (std::size_t k = 0; k < bytes.size(); ++k) out[k] = to_slots(bytes[k]);
    return out;
  };
  a_ = sizes(chain.a);
  abar_ = sizes(chain.abar);
  delta_ = sizes(chain.delta);
  overhead_f_ = sizes(chain.forward_overhead);
  overhead_b_ = sizes(chain.backward_overhead);
  chain_limit_.assign(cells_, 0);
  for (int s = 1; s <= n_; ++s)
    for (int t = s; t <= n_; ++t) {
      const int forward_all = delta_[t] + abar_[s] + overhead_f_[s];
      const int backward = abar_[s] + delta_[s] + delta_[s - 1] + overhead_b_[s];
      chain_limit_[cell(s, t)] = std::max(forward_all, backward);
    }
  const std::size_t entries = cells_ * (static_cast<std::size_t>(slots) + 1);
  values_.assign(entries, static_cast<float>(kInfinity));
  choice_.assign(entries, -2);
  for (int m = 0; m <= slots_; ++m)
    for (int d = 0; d < n_; ++d)
      for (int s = 1; s + d <= n_; ++s) compute(m, s, s + d);
}

int madpipe::remat::RotorTable::to_slots(std::int64_t bytes) const noexcept {
  if (bytes <= 0) return 0;
  return static_cast<int>((bytes + slot_bytes_ - 1) / slot_bytes_);
}

std::size_t madpipe::remat::RotorTable::cell(int s, int t) const noexcept {
  // Row s (1-based) starts after rows 1..s-1, which hold n, n-1, ... cells.
  const std::size_t row = static_cast<std::size_t>(s - 1);
  return row * n_ - row * (row - 1) / 2 + static_cast<std::size_t>(t - s);
}

void madpipe::remat::RotorTable::compute(int m, int s, int t) {
  const std::size_t index = static_cast<std::size_t>(m) * cells_ + cell(s, t);
  double best = kInfinity;
  int choice = -2;
  const double forward = chain_.forward_ms[s];
  if (s == t) {
    const int need =
        t == n_ ? std::max(chain_limit_[cell(s, t)], threshold_) : chain_limit_[cell(s, t)];
    if (m >= need) {
      best = forward + chain_.backward_ms[s];
      choice = -1;
    }
  } else {
    // Chain checkpoint: F_s^all, the rest with abar_s held, B_s.
    if (m >= chain_limit_[cell(s, t)] && m >= abar_[s]) {
      const double rest = value(m - abar_[s], s + 1, t);
      if (rest < kInfinity) {
        best = forward + rest + chain_.backward_ms[s];
        choice = -1;
      }
    }
    // Leaf checkpoint: F_s^ck F_{s+1}^none .. F_{s'}^none, the rest with a_{s'} held, then s..s'.
    int need = 0;
    double forwards = 0;
    for (int sp = s; sp < t; ++sp) {
      const int input = sp == s ? 0 : a_[sp - 1];
      need = std::max(need, delta_[t] + input + a_[sp] + overhead_f_[sp]);
      if (m < need) break;
      forwards += chain_.forward_ms[sp];
      if (forwards >= best) break;
      const double rest = value(m - a_[sp], sp + 1, t);
      if (rest >= kInfinity) continue;
      const double redo = value(m, s, sp);
      if (redo >= kInfinity) continue;
      const double total = forwards + rest + redo;
      if (total < best) {
        best = total;
        choice = sp;
      }
    }
  }
  // Round up so that a stored value is never below the true sum.
  float stored = static_cast<float>(best);
  if (static_cast<double>(stored) < best)
    stored = std::nextafter(stored, static_cast<float>(kInfinity));
  values_[index] = stored;
  choice_[index] = static_cast<std::int16_t>(choice);
}

void madpipe::remat::RotorTable::set_loss_threshold(int threshold) {
  threshold_ = std::max(0, threshold);
  for (int m = 0; m <= slots_; ++m)
    for (int s = n_; s >= 1; --s) compute(m, s, n_);
}

double madpipe::remat::RotorTable::time(int memory) const {
  if (memory < 0) return kInfinity;
  return value(std::min(memory, slots_), 1, n_);
}

madpipe::remat::RematSequence madpipe::remat::RotorTable::sequence(int memory) const {
  RematSequence out;
  if (time(memory) >= kInfinity) return out;
  append_sequence(1, n_, std::min(memory, slots_), out);
  return out;
}

void madpipe::remat::RotorTable::append_sequence(int s, int t, int m, RematSequence& out) const {
  const int choice = choice_[static_cast<std::size_t>(m) * cells_ + cell(s, t)];
  if (choice == -2)
    throw Error(ErrorKind::Internal, "", "", "ROTOR reconstruction hit an infeasible cell");
  if (s == t) {
    out.push_back({RematOpKind::ForwardAll, s});
    out.push_back({RematOpKind::Backward, s});
    return;
  }
  if (choice == -1) {
    out.push_back({RematOpKind::ForwardAll, s});
    append_sequence(s + 1, t, m - abar_[s], out);
    out.push_back({RematOpKind::Backward, s});
    return;
  }
  out.push_back({RematOpKind::ForwardCheckpoint, s});
  for (int k = s + 1; k <= choice; ++k) out.push_back({RematOpKind::ForwardNone, k});
  append_sequence(choice + 1, t, m - a_[choice], out);
  append_sequence(s, choice, m, out);
}

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

madpipe::remat::RematResult replayed(const madpipe::remat::RematChain& chain,
                                     madpipe::remat::RematSequence sequence) {
  madpipe::remat::RematResult result;
  result.replay = madpipe::remat::replay_sequence(chain, sequence);
  if (!result.replay.valid)
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "",
                         "ROTOR produced an invalid sequence: " + result.replay.problem);
  result.feasible = true;
  result.sequence = std::move(sequence);
  return result;
}

std::vector<int> threshold_grid(int slots, int steps) {
  std::vector<int> grid;
  if (steps <= 0 || steps > slots) {
    for (int tau = 0; tau <= slots; ++tau) grid.push_back(tau);
    return grid;
  }
  for (int i = 0; i < steps; ++i) {
    const int tau =
        steps == 1 ? 0 : static_cast<int>(static_cast<long long>(i) * slots / (steps - 1));
    if (grid.empty() || grid.back() != tau) grid.push_back(tau);
  }
  return grid;
}
}  // namespace

madpipe::remat::RematResult madpipe::remat::optimal_remat(const RematChain& chain,
                                                          std::int64_t budget_bytes, int slots) {
  const std::int64_t memory = budget_bytes - chain.a[0];
  if (memory < 0 || slots < 1) return {};
  const RotorTable table(chain, std::max<std::int64_t>(1, ceil_div(memory, slots)), slots);
  const int m = static_cast<int>(std::min<std::int64_t>(slots, memory / table.slot_bytes()));
  if (table.time(m) >= RotorTable::kInfinity) return {};
  return replayed(chain, table.sequence(m));
}

madpipe::remat::RematResult madpipe::remat::optimal_pipelined_remat(
    const RematChain& chain, int nca, std::int64_t budget_bytes, int slots, int threshold_steps) {
  if (nca < 1) throw Error(ErrorKind::Internal, "", "", "optimal_pipelined_remat: nca < 1");
  const std::int64_t memory = budget_bytes - static_cast<std::int64_t>(nca) * chain.a[0];
  if (memory < 0 || slots < 1) return {};
  RotorTable table(chain, std::max<std::int64_t>(1, ceil_div(memory, slots)), slots);
  const long long budget = std::min<long long>(memory / table.slot_bytes(), slots);
  double best = RotorTable::kInfinity;
  int best_threshold = -1, best_top = -1;
  for (int tau : threshold_grid(slots, threshold_steps)) {
    // (nca - 1) * (top - tau) + top <= budget
    const long long top = std::min<long long>(slots, (budget + (nca - 1LL) * tau) / nca);
    if (top < tau) continue;
    table.set_loss_threshold(tau);
    const double time = table.time(static_cast<int>(top));
    if (time < best) {
      best = time;
      best_threshold = tau;
      best_top = static_cast<int>(top);
    }
  }
  if (best_threshold < 0) return {};
  table.set_loss_threshold(best_threshold);
  RematResult result = replayed(chain, table.sequence(best_top));
  const SequenceReplay& r = result.replay;
  if (r.in_flight_bytes(nca) > budget_bytes)
    throw Error(ErrorKind::Internal, "", "", "pipelined ROTOR sequence exceeds its budget");
  return result;
}

static bool dominates(const madpipe::remat::RematOption& a, const madpipe::remat::RematOption& b) {
  return a.total_ms() <= b.total_ms() && a.stored_bytes <= b.stored_bytes &&
         a.transient_bytes <= b.transient_bytes;
}

void madpipe::remat::add_to_front(std::vector<RematOption>& front, RematOption option) {
  if (std::any_of(front.begin(), front.end(),
                  [&](const RematOption& o) { return dominates(o, option); }))
    return;
  front.erase(std::remove_if(front.begin(), front.end(),
                             [&](const RematOption& o) { return dominates(option, o); }),
              front.end());
  front.push_back(std::move(option));
}

void madpipe::remat::sort_fastest_first(std::vector<RematOption>& front) {
  std::sort(front.begin(), front.end(), [](const RematOption& a, const RematOption& b) {
    return std::make_tuple(a.total_ms(), a.stored_bytes, a.transient_bytes) <
           std::make_tuple(b.total_ms(), b.stored_bytes, b.transient_bytes);
  });
}

namespace {
using madpipe::remat::RematOption;

RematOption option_of(const madpipe::remat::RematResult& result) {
  RematOption option;
  option.forward_ms = result.replay.forward_ms;
  option.backward_ms = result.replay.backward_ms;
  option.stored_bytes = result.replay.stored_bytes;
  option.transient_bytes = result.replay.transient_bytes();
  option.sequence = result.sequence;
  return option;
}
}  // namespace

std::vector<madpipe::remat::RematOption> madpipe::remat::remat_options(const RematChain& chain,
                                                                       int slots,
                                                                       int threshold_steps) {
  std::vector<RematOption> options;
  const RematResult store_all = replayed(chain, store_all_sequence(chain));
  options.push_back(option_of(store_all));
  const std::int64_t memory = store_all.replay.peak_bytes - chain.a[0];
  if (memory <= 0 || slots < 1) return options;
  RotorTable table(chain, std::max<std::int64_t>(1, ceil_div(memory, slots)), slots);
  for (int tau : threshold_grid(slots, threshold_steps)) {
    table.set_loss_threshold(tau);
    // The memory tops at which the time drops: the others repeat a sequence with more memory.
    std::vector<int> tops;
    double previous = RotorTable::kInfinity;
    for (int top = tau; top <= slots; ++top) {
      const double time = table.time(top);
      if (time < previous) tops.push_back(top);
      previous = std::min(previous, time);
    }
    for (int top : tops) add_to_front(options, option_of(replayed(chain, table.sequence(top))));
  }
  sort_fastest_first(options);
  return options;
}

std::optional<madpipe::remat::RematOption> madpipe::remat::least_memory_option(
    const RematChain& chain, int slots) {
  const RematResult store_all = replayed(chain, store_all_sequence(chain));
  const std::int64_t memory = store_all.replay.peak_bytes - chain.a[0];
  if (memory <= 0 || slots < 1) return std::nullopt;
  // remat_options() builds the same table: its threshold-0 front starts with this sequence.
  const RotorTable table(chain, std::max<std::int64_t>(1, ceil_div(memory, slots)), slots);
  for (int top = 0; top <= slots; ++top) {
    if (table.time(top) == RotorTable::kInfinity) continue;
    const RematResult least = replayed(chain, table.sequence(top));
    if (least.replay.peak_bytes >= store_all.replay.peak_bytes) return std::nullopt;
    return option_of(least);
  }
  return std::nullopt;
}

madpipe::remat::RematSequence madpipe::remat::sequential_checkpoint_sequence(
    const RematChain& chain, int segments) {
  const int n = chain.length();  // the loss is the last stage of the last segment
  segments = std::max(1, std::min(segments, n));
  std::vector<int> starts;
  for (int i = 0; i < segments; ++i)
    starts.push_back(1 + static_cast<int>(static_cast<long long>(i) * n / segments));
  starts.push_back(n + 1);
  RematSequence sequence;
  for (int i = 0; i + 1 < segments; ++i) {
    sequence.push_back({RematOpKind::ForwardCheckpoint, starts[i]});
    for (int k = starts[i] + 1; k < starts[i + 1]; ++k)
      sequence.push_back({RematOpKind::ForwardNone, k});
  }
  for (int k = starts[segments - 1]; k <= n; ++k) sequence.push_back({RematOpKind::ForwardAll, k});
  for (int k = n; k >= starts[segments - 1]; --k) sequence.push_back({RematOpKind::Backward, k});
  for (int i = segments - 2; i >= 0; --i) {
    for (int k = starts[i]; k < starts[i + 1]; ++k)
      sequence.push_back({RematOpKind::ForwardAll, k});
    for (int k = starts[i + 1] - 1; k >= starts[i]; --k)
      sequence.push_back({RematOpKind::Backward, k});
  }
  return sequence;
}
