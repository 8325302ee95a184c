#include "remat/pofo.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

// The pofo dynamic program (thesis ch. 4).
//
// Units: memory in slots of ceil(budget / steps) bytes, N = budget / slot slots in all; sizes
// round up. The link moves b = beta / slot slots per ms and waiting for it to move e slots costs
// e / b ms (idle()). Rounding down what it moves during each op would lose most of it when ops
// are short, so, like the thesis's partial sums, the forward phase (F_1 .. F_n, once each) reads
// it off one grid, floor(b * (u_F1 + .. + u_Fk)), and runs of F^all stages read the prefetches
// during their B ops off floor(b * (u_B1 + .. + u_Bk)) (reverse time). A grid credits less than
// a slot too much over a busy period of the link, which one slot charged where a busy period or
// a run starts off the grid covers. Recomputation segments round each part down (moved()). So
// every value is an upper bound of the replay with exact sizes, equal to it when sizes are whole
// slots and b * u whole slots.
//
// Forward table OC_x(s, A, dF, dB), memoized over the states reached from OC_0(1, 0, 0, 0):
//   x   the input I of stage s is a_{s-1} (0) or abar_{s-1} (1)
//   A   slots held by the saved, non-offloaded values of stages < s (I excluded)
//   dF  slots still to offload when F_s starts (the link sends them first, in order)
//   dB  slots to prefetch during the backward work of stages >= s, for stages < s
// The value is the time from F_s to the end of B_s, idle included. Options (Table 4.1), each
// with v = keep I (A += I) or offload it (dF += I, dB += I):
//   F_s^all, then stage s+1 from abar_s; B_s closes stage s.
//   F_s^ck F_{s+1}^none .. F_t^none (t < loss), then stage t+1 from a_t; after it, s..t is
//   rematerialized by the backward table with I held.
// Idle before an op (eps_F) lets pending offloads free memory: Lemma 8 counted from the start of
// the stage's forwards. Idle after an op (eps_B) lets prefetches wait: counted to the end of its
// backward work. At the loss, eps_G = (dF + dB) / b: offloads end, then prefetches start (OR.3).
//
// Backward table C(s, t, A, D): time to recompute and backpropagate s..t with its input stored
// and counted in A, while the link prefetches D slots, as late as possible, for readers after
// the segment. F^all first (then s+1..t, then B_s) or F^ck .. F_{s'}^none (then s'+1..t with
// a_{s'} held, then s..s' again); the part that runs last gets the prefetch first.
//
// Search: top-down over the states reached from stage 1 only, blocks of both tables allocated
// when first used; an option is not followed when its own time plus lower_bound() of its next
// state cannot beat the best one so far. Worst case O(L^2 N^3 + L^3 N^2) (thesis Thm 12).
//
// The leaf memory check covers F_s..F_{s'} only, as ROTOR's code does (RotorTable), so that with
// b -> 0 the values are exactly those of optimal_remat.

namespace {
using madpipe::remat::RematChain;
using madpipe::remat::RematOp;
using madpipe::remat::RematOpKind;
using madpipe::remat::RematSequence;

constexpr double kInfinity = std::numeric_limits<double>::infinity();
using Slots = std::int64_t;

Slots positive(Slots v) { return v > 0 ? v : 0; }

class PofoSolver {
 public:
  PofoSolver(const RematChain& chain, std::int64_t budget_bytes, double host_bytes_per_ms,
             int steps, bool remat);

  double solve() { return forward(State{1, 0, 0, 0, 0}); }
  // The optimal sequence and its time in double precision (the table keeps floats).
  RematSequence sequence(double& time_ms);

 private:
  struct State {
    int s = 0, x = 0;
    Slots a = 0, f = 0, b = 0;  // A, dF, dB
  };
  struct ForwardOption {
    std::int32_t choice = 0;  // 0/1: F^all, keep/offload; 2 + 2 (t - s) + v: F^ck up to t
    double cost = 0;          // stage s's own time, its backward table cell included
    State next;
  };
  struct Part {
    int s = 0, t = 0;
    Slots a = 0, d = 0;
  };
  struct SegmentOption {
    int choice = -1;  // -1: F^all first; s' >= s: F^ck .. F_{s'}^none first
    double cost = 0;
    Part parts[2];  // the sub-segments, in the order they run
    int count = 0;
  };
  // A forward table value, rounded up, and its choice (-1: infeasible); NaN = unknown.
  struct Entry {
    float value = std::numeric_limits<float>::quiet_NaN();
    std::int32_t choice = -1;
  };
  // Backward table cells of one (s, A): (D, t) with t innermost, as the forward table scans t.
  struct SegmentBlock {
    std::vector<double> value;  // NaN = unknown
    std::vector<std::int16_t> choice;
  };

  double forward(const State& st);
  double loss(int x, Slots a, Slots f, Slots b) const;
  // Calls visit for each option of the state, leaving out leaf options that cannot beat bound.
  template <class Visit>
  void forward_options(const State& st, const double& bound, Visit&& visit);
  double segment(int s, int t, Slots a, Slots d);
  template <class Visit>
  void segment_options(int s, int t, Slots a, Slots d, const double& bound, Visit&& visit);
  double rebuild(const State& st, RematSequence& forward_ops, RematSequence& backward_ops,
                 std::vector<int>& offloaded);
  void rebuild_segment(const Part& part, RematSequence& out);

  Slots to_slots(std::int64_t bytes) const {
    return bytes <= 0 ? 0 : (bytes + slot_bytes_ - 1) / slot_bytes_;
  }
  Slots input(int s, int x) const { return x ? abar_[s - 1] : a_[s - 1]; }
  // M[F_k^none] (M[F_k^ck] for k = first) in a segment first..t: the input is counted outside.
  Slots forward_peak(int k, int first, int t) const {
    return delta_[t] + (k == first ? 0 : a_[k - 1]) + a_[k] + of_[k];
  }
  Slots moved(double ms) const {  // what the link moves in ms, rounded down
    if (!(slots_per_ms_ > 0) || !(ms > 0)) return 0;
    return static_cast<Slots>(std::floor(std::min(ms * slots_per_ms_, 1e15) + 1e-9));
  }
  double idle(Slots excess) const {  // waiting for the link to move excess slots
    if (excess <= 0) return 0;
    return slots_per_ms_ > 0 ? static_cast<double>(excess) / slots_per_ms_ : kInfinity;
  }
  // The input of stage s joins the offload queue: when the link was idle, its busy period starts
  // off the forward grid, which may over-credit it by less than a slot.
  Slots offloaded(int s, Slots in, Slots pending) const {
    return in + (pending == 0 && off_grid(lost_forward_[s - 1]) ? 1 : 0);
  }
  double forwards(int s, int t) const { return prefix_forward_[t] - prefix_forward_[s - 1]; }
  double sequential(int s, int t) const { return prefix_both_[t] - prefix_both_[s - 1]; }
  static bool off_grid(double lost) { return lost > 1e-9; }
  // A state's time is at least its forwards (or the offloads left, when longer) plus its
  // backwards (or the prefetches left): dF goes before the loss backward, dB after the loss
  // forward. The grids credit the link with at most what they lost where the state starts.
  double lower_bound(const State& st) const {
    const double forward = forwards(st.s, n_), backward = sequential(st.s, n_) - forward;
    const double offload =
        static_cast<double>(st.f) - std::max(0.0, lost_forward_[st.s - 1] - lost_forward_[n_]);
    const double prefetch = static_cast<double>(st.b) - (st.x ? lost_backward_[st.s - 1] : 0.0);
    return std::max(forward, offload * ms_per_slot_) + std::max(backward, prefetch * ms_per_slot_);
  }
  static float round_up(double v) {
    const float f = static_cast<float>(v);
    return static_cast<double>(f) < v ? std::nextafter(f, std::numeric_limits<float>::infinity())
                                      : f;
  }
  // The forward table holds one block of (dF, dB) states per (s, x, A), allocated when reached.
  Entry& entry(const State& st) {
    const Slots in = input(st.s, st.x);
    const Slots width = total_ + 1 - st.a - (st.x ? in : 0);
    std::vector<Entry>& block =
        forward_blocks_[(static_cast<std::size_t>(st.s) * 2 + static_cast<std::size_t>(st.x)) *
                            static_cast<std::size_t>(total_ + 1) +
                        static_cast<std::size_t>(st.a)];
    if (block.empty()) block.resize(static_cast<std::size_t>((total_ + 1 - st.a - in) * width));
    return block[static_cast<std::size_t>(st.f * width + st.b)];
  }
  SegmentBlock& segment_block(int s, Slots a) {
    SegmentBlock& block =
        segment_blocks_[static_cast<std::size_t>(s) * static_cast<std::size_t>(total_ + 1) +
                        static_cast<std::size_t>(a)];
    if (block.value.empty()) {
      const std::size_t size =
          static_cast<std::size_t>(total_ + 1) * static_cast<std::size_t>(n_ - s);
      block.value.assign(size, std::numeric_limits<double>::quiet_NaN());
      block.choice.assign(size, -2);
    }
    return block;
  }
  std::size_t segment_index(int s, int t, Slots d) const {
    return static_cast<std::size_t>(d) * static_cast<std::size_t>(n_ - s) +
           static_cast<std::size_t>(t - s);
  }

  const RematChain& chain_;
  int n_;  // the loss
  std::int64_t slot_bytes_;
  Slots total_;  // N
  double slots_per_ms_;
  double ms_per_slot_;  // 0 without a link, when dF = dB = 0
  bool remat_, offload_;
  std::vector<Slots> a_, abar_, delta_, of_, ob_;
  std::vector<double> prefix_forward_, prefix_both_;
  // Link grids: what it moves from the start of the forward phase to the end of F_k, and (in
  // reverse time) over B_1..B_k, rounded down, and the fraction of a slot that rounding lost.
  std::vector<Slots> grid_forward_, grid_backward_;
  std::vector<double> lost_forward_, lost_backward_;
  std::vector<std::vector<Entry>> forward_blocks_;  // per (s, x, A)
  std::vector<SegmentBlock> segment_blocks_;        // per (s, A)
};

PofoSolver::PofoSolver(const RematChain& chain, std::int64_t budget_bytes, double host_bytes_per_ms,
                       int steps, bool remat)
    : chain_(chain),
      n_(chain.length()),
      slot_bytes_(std::max<std::int64_t>(1, (budget_bytes + steps - 1) / steps)),
      total_(budget_bytes / slot_bytes_),
      slots_per_ms_(host_bytes_per_ms / static_cast<double>(slot_bytes_)),
      ms_per_slot_(slots_per_ms_ > 0 ? 1 / slots_per_ms_ : 0),
      remat_(remat),
      offload_(host_bytes_per_ms > 0) {
  const auto sizes = [&](const std::vector<std::int64_t>& bytes) {
    std::vector<Slots> out(bytes.size());
    for (std::size_t k = 0; k < bytes.size(); ++k) out[k] = to_slots(bytes[k]);
    return out;
  };
  a_ = sizes(chain.a);
  abar_ = sizes(chain.abar);
  abar_[0] = a_[0];
  delta_ = sizes(chain.delta);
  of_ = sizes(chain.forward_overhead);
  ob_ = sizes(chain.backward_overhead);
  const std::size_t size = static_cast<std::size_t>(n_) + 1;
  prefix_forward_.assign(size, 0.0);
  prefix_both_ = prefix_forward_;
  grid_forward_.assign(size, 0);
  grid_backward_ = grid_forward_;
  lost_forward_.assign(size, 0.0);
  lost_backward_ = lost_forward_;
  double backward = 0;
  for (int k = 1; k <= n_; ++k) {
    prefix_forward_[k] = prefix_forward_[k - 1] + chain.forward_ms[k];
    prefix_both_[k] = prefix_both_[k - 1] + chain.forward_ms[k] + chain.backward_ms[k];
    backward += chain.backward_ms[k];
    grid_forward_[k] = moved(prefix_forward_[k]);
    grid_backward_[k] = moved(backward);
    lost_forward_[k] =
        std::max(0.0, prefix_forward_[k] * slots_per_ms_ - static_cast<double>(grid_forward_[k]));
    lost_backward_[k] =
        std::max(0.0, backward * slots_per_ms_ - static_cast<double>(grid_backward_[k]));
  }
  const std::size_t rows = static_cast<std::size_t>(n_ + 1) * static_cast<std::size_t>(total_ + 1);
  forward_blocks_.resize(2 * rows);
  segment_blocks_.resize(rows);
}

double PofoSolver::loss(int x, Slots a, Slots f, Slots b) const {
  const int s = n_;
  const Slots in = input(s, x), free = total_ - a;
  const Slots mf = delta_[s] + abar_[s] + of_[s];
  const Slots mb = abar_[s] + delta_[s] + delta_[s - 1] + ob_[s];
  if (mf + in > free || mb + in > free) return kInfinity;
  const Slots ef = positive(mf + in + f - free), eb = positive(mb + in + b - free);
  const double uf = chain_.forward_ms[s], ub = chain_.backward_ms[s];
  const Slots moved_f = grid_forward_[s] - grid_forward_[s - 1];
  const Slots left = positive(f - moved_f - ef) + positive(b - moved(ub) - eb);
  return uf + ub + idle(ef) + idle(eb) + idle(left);
}

template <class Visit>
void PofoSolver::forward_options(const State& st, const double& bound, Visit&& visit) {
  const int s = st.s;
  const Slots in = input(s, st.x), free = total_ - st.a;
  const bool can_offload = offload_ && in > 0;
  const double uf = chain_.forward_ms[s], ub = chain_.backward_ms[s];
  const Slots mf = delta_[n_] + abar_[s] + of_[s];
  const Slots mb = abar_[s] + delta_[s] + delta_[s - 1] + ob_[s];
  if (mf + in <= free && mb + in <= free) {
    const Slots ef = positive(mf + in + st.f - free), eb = positive(mb + in + st.b - free);
    const Slots df = grid_forward_[s] - grid_forward_[s - 1] + ef;
    const Slots db = grid_backward_[s] - grid_backward_[s - 1] + eb;
    // A run of F^all stages on the backward grid starts here (after a segment or at stage 1).
    const Slots b_in = st.b + (st.x == 0 && st.b > 0 && off_grid(lost_backward_[s - 1]) ? 1 : 0);
    const Slots b_out = positive(b_in - db);
    const double cost = uf + ub + idle(ef) + idle(eb);
    visit(ForwardOption{0, cost, {s + 1, 1, st.a + in, positive(st.f - df), b_out}});
    if (can_offload)
      visit(ForwardOption{1,
                          cost,
                          {s + 1, 1, st.a, positive(st.f + offloaded(s, in, st.f) - df),
                           b_out + in + (b_out == 0 && off_grid(lost_backward_[s]) ? 1 : 0)}});
  }
  if (!remat_) return;
  Slots peak = std::numeric_limits<Slots>::min();  // max over k of M[F_k] - moved before F_k
  bool keep_fits = true;
  for (int t = s; t < n_; ++t) {
    const Slots m = forward_peak(t, s, n_);
    if (t == s ? m + in > free : m > free) break;
    if (m + in > free) keep_fits = false;
    peak = std::max(peak, m - moved(forwards(s, t - 1)));
    const double run = forwards(s, t);
    if (run + sequential(s, n_) >= bound) return;
    const double redo = segment(s, t, st.a + in, st.b);
    if (redo == kInfinity) continue;
    const Slots ef = positive(peak + in + st.f - free);
    const Slots df = grid_forward_[t] - grid_forward_[s - 1] + ef, db = moved(redo);
    const double cost = run + idle(ef) + redo;
    const std::int32_t code = 2 + 2 * (t - s);
    if (keep_fits)
      visit(ForwardOption{
          code, cost, {t + 1, 0, st.a + in, positive(st.f - df), positive(st.b - db)}});
    if (can_offload)
      visit(ForwardOption{code + 1,
                          cost,
                          {t + 1, 0, st.a, positive(st.f + offloaded(s, in, st.f) - df),
                           positive(st.b - db) + in}});
  }
}

double PofoSolver::forward(const State& st) {
  const Slots in = input(st.s, st.x);
  // Pending offloads are still on the GPU, and what is prefetched for stages < s is there when
  // their backward work starts, next to abar_{s-1} (x = 1) which B_{s-1} reads.
  if (st.a + in + st.f > total_ || st.a + st.b + (st.x ? in : 0) > total_) return kInfinity;
  if (st.s == n_) return loss(st.x, st.a, st.f, st.b);
  {
    const Entry& known = entry(st);
    if (!std::isnan(known.value)) return known.value;
  }
  double best = kInfinity;
  std::int32_t choice = -1;
  forward_options(st, best, [&](const ForwardOption& option) {
    if (option.cost + lower_bound(option.next) >= best) return;
    const double total = option.cost + forward(option.next);
    if (total < best) {
      best = total;
      choice = option.choice;
    }
  });
  entry(st) = {round_up(best), choice};
  return entry(st).value;
}

template <class Visit>
void PofoSolver::segment_options(int s, int t, Slots a, Slots d, const double& bound,
                                 Visit&& visit) {
  const Slots free = total_ - a;
  const double uf = chain_.forward_ms[s], ub = chain_.backward_ms[s];
  const Slots mf = delta_[t] + abar_[s] + of_[s];
  const Slots mb = abar_[s] + delta_[s] + delta_[s - 1] + ob_[s];
  if (mf <= free && mb <= free) {
    // Reverse time: B_s (waits eb after it), then s+1..t, then F_s^all.
    const Slots eb = positive(mb + d - free);
    const Slots d1 = positive(d - moved(ub) - eb);
    double inner = 0;
    Slots d2 = d1;
    if (s < t) {
      inner = segment(s + 1, t, a + abar_[s], d1);
      d2 = positive(d1 - moved(inner));
    }
    if (inner < kInfinity) {
      const Slots ef = positive(mf + d2 - free);
      SegmentOption option{-1, uf + inner + ub + idle(ef) + idle(eb), {}, 0};
      if (s < t) option.parts[option.count++] = {s + 1, t, a + abar_[s], d1};
      visit(option);
    }
  }
  if (s == t) return;
  Slots highest = 0;
  for (int sp = s; sp < t; ++sp) {
    const Slots m = forward_peak(sp, s, t);
    if (m > free) break;
    highest = std::max(highest, m);
    const double run = forwards(s, sp);
    if (run + sequential(s, t) >= bound) break;
    // Reverse time: s..s' again, then s'+1..t, then the forwards.
    const double redo = segment(s, sp, a, d);
    if (redo == kInfinity) continue;
    const Slots d2 = positive(d - moved(redo));
    const double rest = segment(sp + 1, t, a + a_[sp], d2);
    if (rest == kInfinity) continue;
    const Slots d3 = positive(d2 - moved(rest));
    Slots ef = 0;
    if (highest + d3 > free) {
      // Memory rises while the forwards run (prefetching): Lemma 8 counted to their end.
      Slots worst = std::numeric_limits<Slots>::min();
      for (int k = s; k <= sp; ++k)
        worst = std::max(worst, forward_peak(k, s, t) - moved(forwards(k + 1, sp)));
      ef = positive(worst + d3 - free);
    }
    SegmentOption option{sp, run + rest + redo + idle(ef), {}, 2};
    option.parts[0] = {sp + 1, t, a + a_[sp], d2};
    option.parts[1] = {s, sp, a, d};
    visit(option);
  }
}

double PofoSolver::segment(int s, int t, Slots a, Slots d) {
  if (a > total_ || d > total_) return kInfinity;
  SegmentBlock& block = segment_block(s, a);
  const std::size_t index = segment_index(s, t, d);
  if (!std::isnan(block.value[index])) return block.value[index];
  double best = kInfinity;
  int choice = -2;
  segment_options(s, t, a, d, best, [&](const SegmentOption& option) {
    if (option.cost < best) {
      best = option.cost;
      choice = option.choice;
    }
  });
  block.value[index] = best;
  block.choice[index] = static_cast<std::int16_t>(choice);
  return best;
}

void PofoSolver::rebuild_segment(const Part& part, RematSequence& out) {
  const int s = part.s, t = part.t;
  if (segment(s, t, part.a, part.d) == kInfinity)
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "",
                         "pofo reconstruction hit an infeasible segment");
  const int choice = segment_block(s, part.a).choice[segment_index(s, t, part.d)];
  SegmentOption chosen;
  segment_options(s, t, part.a, part.d, kInfinity, [&](const SegmentOption& option) {
    if (option.choice == choice) chosen = option;
  });
  if (choice == -1) {
    out.push_back({RematOpKind::ForwardAll, s});
    if (chosen.count == 1) rebuild_segment(chosen.parts[0], out);
    out.push_back({RematOpKind::Backward, s});
    return;
  }
  out.push_back({RematOpKind::ForwardCheckpoint, s});
  for (int k = s + 1; k <= choice; ++k) out.push_back({RematOpKind::ForwardNone, k});
  rebuild_segment(chosen.parts[0], out);
  rebuild_segment(chosen.parts[1], out);
}

double PofoSolver::rebuild(const State& st, RematSequence& forward_ops, RematSequence& backward_ops,
                           std::vector<int>& offloaded) {
  const int s = st.s;
  if (s == n_) {
    forward_ops.push_back({RematOpKind::ForwardAll, s});
    backward_ops.push_back({RematOpKind::Backward, s});
    return loss(st.x, st.a, st.f, st.b);
  }
  const Entry known = entry(st);
  if (std::isnan(known.value) || known.choice < 0)
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "",
                         "pofo reconstruction hit an infeasible state");
  const std::int32_t choice = known.choice;
  ForwardOption chosen;
  forward_options(st, kInfinity, [&](const ForwardOption& option) {
    if (option.choice == choice) chosen = option;
  });
  const bool offload = choice % 2 == 1;
  const int t = choice < 2 ? s : s + (choice - 2) / 2;
  forward_ops.push_back({choice < 2 ? RematOpKind::ForwardAll : RematOpKind::ForwardCheckpoint, s});
  if (offload) {
    forward_ops.push_back({RematOpKind::Offload, s});
    offloaded.push_back(s);
  }
  for (int k = s + 1; k <= t; ++k) forward_ops.push_back({RematOpKind::ForwardNone, k});
  const double rest = rebuild(chosen.next, forward_ops, backward_ops, offloaded);
  if (choice < 2) {
    backward_ops.push_back({RematOpKind::Backward, s});
  } else {
    rebuild_segment({s, t, st.a + input(s, st.x), st.b}, backward_ops);
  }
  return chosen.cost + rest;
}

RematSequence PofoSolver::sequence(double& time_ms) {
  RematSequence forward_ops, backward_ops;
  std::vector<int> offloaded;
  time_ms = rebuild(State{1, 0, 0, 0, 0}, forward_ops, backward_ops, offloaded);
  RematSequence out = std::move(forward_ops);
  // Prefetches are issued after the loss forward, in the order the backward reads them.
  std::sort(offloaded.rbegin(), offloaded.rend());
  for (int s : offloaded) out.push_back({RematOpKind::Prefetch, s});
  out.insert(out.end(), backward_ops.begin(), backward_ops.end());
  return out;
}

madpipe::remat::OffloadResult solve(const RematChain& chain, std::int64_t budget_bytes,
                                    double host_bytes_per_ms, int steps, bool remat) {
  if (steps < 1 || steps > 10000)
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "steps",
                         "must be in 1..10000, got " + std::to_string(steps));
  if (!(host_bytes_per_ms >= 0) || std::isinf(host_bytes_per_ms))
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "host_bytes_per_ms",
                         "must be finite and >= 0, got " + std::to_string(host_bytes_per_ms));
  // The tables recurse once per stage.
  if (chain.length() < 1 || chain.length() > 4000)
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "chain",
                         "needs 1..4000 stages, got " + std::to_string(chain.length()));
  madpipe::remat::OffloadResult result;
  result.predicted_ms = kInfinity;
  if (budget_bytes <= 0) return result;
  PofoSolver solver(chain, budget_bytes, host_bytes_per_ms, steps, remat);
  const double solved = solver.solve();
  if (solved == kInfinity) return result;
  double best = kInfinity;
  result.sequence = solver.sequence(best);
  result.replay = madpipe::remat::replay_offload_sequence(chain, result.sequence, budget_bytes,
                                                          host_bytes_per_ms);
  if (!result.replay.valid)
    throw madpipe::Error(madpipe::ErrorKind::Internal, "", "",
                         "pofo produced an invalid sequence: " + result.replay.problem);
  result.feasible = true;
  result.predicted_ms = best;
  return result;
}
}  // namespace

madpipe::remat::OffloadResult madpipe::remat::optimal_offload_remat(const RematChain& chain,
                                                                    std::int64_t budget_bytes,
                                                                    double host_bytes_per_ms,
                                                                    int steps) {
  return solve(chain, budget_bytes, host_bytes_per_ms, steps, true);
}

madpipe::remat::OffloadResult madpipe::remat::optimal_offload_only(const RematChain& chain,
                                                                   std::int64_t budget_bytes,
                                                                   double host_bytes_per_ms,
                                                                   int steps) {
  return solve(chain, budget_bytes, host_bytes_per_ms, steps, false);
}
