#include "remat/offload_replay.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

namespace {
using madpipe::remat::OffloadReplay;
using madpipe::remat::RematChain;
using madpipe::remat::RematOp;
using madpipe::remat::RematOpKind;
using madpipe::remat::RematSequence;

constexpr double kNever = std::numeric_limits<double>::infinity();

enum class Where : unsigned char { Absent, Gpu, Host, Incoming };

// a_k (plain) or abar_k (recorded).
struct TensorId {
  bool recorded = false;
  int k = 0;
};

// One transfer on the host link, active over [start_ms, end_ms]. Offloads live in forward time;
// prefetches are placed in reverse time (measured back from the end of the sequence), where a
// prefetch frees memory as it goes just as an offload does in forward time.
struct Transfer {
  std::int64_t bytes = 0;
  double start_ms = 0, end_ms = 0;
  TensorId tensor;
  int consumer = -1;  // prefetch: index of the first backward-phase compute op reading it
  std::size_t op_index = 0;
};

// Bytes of the transfers not yet done at time t.
double pending_bytes(const std::vector<Transfer>& transfers, double t) {
  double total = 0;
  for (std::size_t j = 0; j < transfers.size(); ++j) {
    const Transfer& x = transfers[j];
    if (t <= x.start_ms) {
      total += static_cast<double>(x.bytes);
    } else if (t < x.end_ms) {
      total += static_cast<double>(x.bytes) * (x.end_ms - t) / (x.end_ms - x.start_ms);
    }
  }
  return total;
}

// Bytes of the transfers that end after t: what they hold when memory goes only at completion.
double unfinished_bytes(const std::vector<Transfer>& transfers, double t) {
  double total = 0;
  for (std::size_t j = 0; j < transfers.size(); ++j)
    if (transfers[j].end_ms > t) total += static_cast<double>(transfers[j].bytes);
  return total;
}

bool fits(double bytes, double budget) { return bytes <= budget * (1 + 1e-12) + 1e-6; }

std::int64_t whole_bytes(double bytes) {
  return static_cast<std::int64_t>(std::ceil(bytes - 1e-6 - 1e-12 * bytes));
}

// Earliest t >= from at which fixed + pending_bytes(t) fits the budget; kNever if it never does.
// The transfers are disjoint (one link), so the pending bytes fall piecewise linearly.
double earliest_fit(const std::vector<Transfer>& transfers, double fixed, double budget,
                    double from) {
  double previous = from;
  double previous_bytes = fixed + pending_bytes(transfers, from);
  if (fits(previous_bytes, budget)) return from;
  if (!fits(fixed, budget)) return kNever;
  std::vector<double> points;
  for (std::size_t j = 0; j < transfers.size(); ++j)
    for (double p : {transfers[j].start_ms, transfers[j].end_ms})
      if (p > from) points.push_back(p);
  std::sort(points.begin(), points.end());
  for (double p : points) {
    const double bytes = fixed + pending_bytes(transfers, p);
    if (fits(bytes, budget)) {
      if (previous_bytes <= bytes) return p;
      return previous + (previous_bytes - budget) / (previous_bytes - bytes) * (p - previous);
    }
    previous = p;
    previous_bytes = bytes;
  }
  return kNever;
}

// One backward-phase compute op, as the first pass finds it.
struct BackwardOp {
  std::size_t op_index = 0;
  double duration_ms = 0;
  double need_bytes = 0;  // stored (prefetches in flight excluded) + outputs + overhead
};

class Replayer {
 public:
  Replayer(const RematChain& chain, const RematSequence& sequence, std::int64_t budget,
           double host_bytes_per_ms)
      : chain_(chain),
        sequence_(sequence),
        budget_(static_cast<double>(budget)),
        beta_(host_bytes_per_ms),
        n_(chain.length()),
        plain_(chain.a.size(), Where::Absent),
        recorded_(chain.a.size(), Where::Absent),
        gradient_(chain.a.size(), false),
        produced_ms_(chain.a.size(), 0.0) {
    plain_[0] = Where::Gpu;
    gradient_[n_] = true;
    gpu_bytes_ = chain.a[0] + chain.delta[n_];
  }

  OffloadReplay run();

 private:
  OffloadReplay fail(std::size_t index, const std::string& problem) {
    OffloadReplay replay;
    replay.problem = "op " + std::to_string(index + 1) + " (" +
                     madpipe::remat::to_string(RematSequence{sequence_[index]}, chain_) +
                     "): " + problem;
    return replay;
  }

  Where& where(TensorId id) { return id.recorded ? recorded_[id.k] : plain_[id.k]; }
  std::int64_t size(TensorId id) const { return id.recorded ? chain_.abar[id.k] : chain_.a[id.k]; }
  void move(TensorId id, Where to) {
    Where& at = where(id);
    if (at == Where::Gpu) gpu_bytes_ -= size(id);
    if (to == Where::Gpu) gpu_bytes_ += size(id);
    at = to;
  }
  static bool present(Where w) { return w == Where::Gpu || w == Where::Incoming; }
  // The tensor stage k reads: abar_{k-1} when recorded, else a_{k-1}.
  TensorId input_of(int k) const { return {k > 1 && present(recorded_[k - 1]), k - 1}; }

  std::string check_inputs(const RematOp& op, std::vector<TensorId>& reads);
  std::int64_t output_bytes(const RematOp& op) const;
  void apply(const RematOp& op);
  double duration(const RematOp& op) const {
    return op.kind == RematOpKind::Backward ? chain_.backward_ms[op.stage]
                                            : chain_.forward_ms[op.stage];
  }
  bool finished() const;

  // The three passes of run(); each returns the failed replay, or nothing when it went through.
  // Forward phase, in forward time: compute as early as memory allows, offloads as early as the
  // link allows. Ends after the loss forward (next_op_ the op after it).
  std::optional<OffloadReplay> forward_phase(OffloadReplay& replay);
  // Backward phase, first pass: inputs, memory needs and the reader of each prefetch.
  std::optional<OffloadReplay> list_backward(std::vector<BackwardOp>& ops,
                                             std::vector<Transfer>& prefetches);
  // Backward phase in reverse time from its end (reverse_time_ its length); returns through
  // `before_backward` what the link must prefetch before the loss backward.
  std::optional<OffloadReplay> schedule_backward(const std::vector<BackwardOp>& ops,
                                                 std::vector<Transfer> prefetches,
                                                 double& before_backward);
  // Counts the memory of an op that holds `fixed` bytes from `start`, beside the transfers.
  void hold(double fixed, const std::vector<Transfer>& transfers, double start) {
    peak_ = std::max(peak_, fixed + pending_bytes(transfers, start));
    peak_at_completion_ = std::max(peak_at_completion_, fixed + unfinished_bytes(transfers, start));
  }

  const RematChain& chain_;
  const RematSequence& sequence_;
  double budget_;
  double beta_;
  int n_;
  std::vector<Where> plain_, recorded_;
  std::vector<bool> gradient_;
  std::vector<double> produced_ms_;  // end of the op that made a_k / abar_k (forward phase)
  std::int64_t gpu_bytes_ = 0;       // tensors on the GPU for good, gradients included
  double peak_ = 0, peak_at_completion_ = 0;
  double compute_ms_ = 0;        // compute of every op, in both phases
  double offloads_end_ = 0;      // the forward phase's compute and offloads done
  double reverse_time_ = 0;      // length of the backward phase's compute
  std::size_t next_op_ = 0;      // the first op of the backward phase
  std::vector<TensorId> reads_;  // scratch: what an op reads
};

std::string Replayer::check_inputs(const RematOp& op, std::vector<TensorId>& reads) {
  const int k = op.stage;
  reads.clear();
  auto missing = [&](TensorId id, const char* what) {
    return std::string(what) + (where(id) == Where::Host
                                    ? " is on the host (no prefetch before this op)"
                                    : " is not stored");
  };
  switch (op.kind) {
    case RematOpKind::ForwardAll:
    case RematOpKind::ForwardCheckpoint:
    case RematOpKind::ForwardNone: {
      const TensorId input =
          op.kind == RematOpKind::ForwardNone ? TensorId{false, k - 1} : input_of(k);
      if (!present(where(input))) return missing(input, "its input");
      reads.push_back(input);
      if (where({false, k}) == Where::Incoming || where({true, k}) == Where::Incoming)
        return "it overwrites a tensor that is being prefetched";
      return "";
    }
    case RematOpKind::Backward: {
      if (!gradient_[k]) return "the gradient it needs is not stored";
      if (!present(recorded_[k])) {
        if (recorded_[k] == Where::Host) return missing({true, k}, "its recorded forward");
        return "its forward was not recorded (no F all)";
      }
      const TensorId input = input_of(k);
      if (!present(where(input))) return missing(input, "its input");
      reads.push_back({true, k});
      reads.push_back(input);
      return "";
    }
    case RematOpKind::Offload:
    case RematOpKind::Prefetch:
      break;
  }
  MADPIPE_UNREACHABLE("check_inputs of a transfer");
}

std::int64_t Replayer::output_bytes(const RematOp& op) const {
  const int k = op.stage;
  if (op.kind == RematOpKind::Backward) return chain_.delta[k - 1] + chain_.backward_overhead[k];
  const std::int64_t output = op.kind == RematOpKind::ForwardAll ? chain_.abar[k] : chain_.a[k];
  return output + chain_.forward_overhead[k];
}

void Replayer::apply(const RematOp& op) {
  const int k = op.stage;
  switch (op.kind) {
    case RematOpKind::ForwardAll:
      move({false, k}, Where::Absent);
      move({true, k}, Where::Gpu);
      return;
    case RematOpKind::ForwardCheckpoint:
      move({false, k}, Where::Gpu);
      return;
    case RematOpKind::ForwardNone:
      move({false, k}, Where::Gpu);
      move({false, k - 1}, Where::Absent);
      return;
    case RematOpKind::Backward:
      gradient_[k] = false;
      gpu_bytes_ -= chain_.delta[k];
      move({true, k}, Where::Absent);
      move({false, k - 1}, Where::Absent);
      if (!gradient_[k - 1]) gpu_bytes_ += chain_.delta[k - 1];
      gradient_[k - 1] = true;
      return;
    case RematOpKind::Offload:
    case RematOpKind::Prefetch:
      break;
  }
  MADPIPE_UNREACHABLE("apply of a transfer");
}

bool Replayer::finished() const {
  for (std::size_t k = 0; k < plain_.size(); ++k)
    if (plain_[k] != Where::Absent || recorded_[k] != Where::Absent || (gradient_[k] && k != 0))
      return false;
  return gradient_[0];
}

std::optional<OffloadReplay> Replayer::forward_phase(OffloadReplay& replay) {
  std::vector<Transfer> offloads;
  double compute_end = 0, previous_start = 0, link_free = 0;
  std::size_t i = 0;
  bool loss_done = false;
  for (; i < sequence_.size() && !loss_done; ++i) {
    const RematOp& op = sequence_[i];
    const int k = op.stage;
    if (k < 1 || k > n_) return fail(i, "stage out of range");
    if (op.kind == RematOpKind::Prefetch)
      return fail(i, "prefetches must follow the loss forward (thesis OR.3)");
    if (op.kind == RematOpKind::Offload) {
      if (k == n_) return fail(i, "the loss input cannot be offloaded (thesis OR.2)");
      if (!(beta_ > 0)) return fail(i, "offloading needs a positive host bandwidth");
      TensorId tensor{present(recorded_[k - 1]) && k > 1, k - 1};
      if (where(tensor) != Where::Gpu) return fail(i, "the input of its stage is not on the GPU");
      Transfer transfer;
      transfer.bytes = size(tensor);
      transfer.tensor = tensor;
      transfer.op_index = i;
      transfer.start_ms = std::max({previous_start, link_free, produced_ms_[tensor.k]});
      transfer.end_ms = transfer.start_ms + static_cast<double>(transfer.bytes) / beta_;
      link_free = transfer.end_ms;
      replay.offloaded_bytes += transfer.bytes;
      move(tensor, Where::Host);
      offloads.push_back(transfer);
      continue;
    }
    const std::string problem = check_inputs(op, reads_);
    if (!problem.empty()) return fail(i, problem);
    const double fixed = static_cast<double>(gpu_bytes_ + output_bytes(op));
    const double start = earliest_fit(offloads, fixed, budget_, compute_end);
    if (start == kNever)
      return fail(i, "needs " + std::to_string(whole_bytes(fixed)) +
                         " bytes, more than the budget even once every offload is done");
    hold(fixed, offloads, start);
    const double d = duration(op);
    compute_ms_ += d;
    previous_start = start;
    compute_end = start + d;
    apply(op);
    if (op.kind != RematOpKind::Backward) produced_ms_[k] = compute_end;
    loss_done = op.kind == RematOpKind::ForwardAll && k == n_;
  }
  if (!loss_done) {
    replay.problem = "the sequence has no loss forward";
    return replay;
  }
  replay.forward_ms = compute_end;
  replay.stored_bytes = gpu_bytes_;
  offloads_end_ = std::max(compute_end, link_free);
  next_op_ = i;
  return std::nullopt;
}

std::optional<OffloadReplay> Replayer::list_backward(std::vector<BackwardOp>& ops,
                                                     std::vector<Transfer>& prefetches) {
  for (std::size_t i = next_op_; i < sequence_.size(); ++i) {
    const RematOp& op = sequence_[i];
    const int k = op.stage;
    if (k < 1 || k > n_) return fail(i, "stage out of range");
    if (op.kind == RematOpKind::Offload)
      return fail(i, "offloads must precede the loss forward (thesis OR.2)");
    if (op.kind == RematOpKind::Prefetch) {
      TensorId tensor{recorded_[k - 1] == Where::Host && k > 1, k - 1};
      if (where(tensor) != Where::Host) return fail(i, "the input of its stage is not offloaded");
      Transfer transfer;
      transfer.bytes = size(tensor);
      transfer.tensor = tensor;
      transfer.op_index = i;
      move(tensor, Where::Incoming);
      prefetches.push_back(transfer);
      continue;
    }
    const std::string problem = check_inputs(op, reads_);
    if (!problem.empty()) return fail(i, problem);
    for (const TensorId& id : reads_) {
      if (where(id) != Where::Incoming) continue;
      move(id, Where::Gpu);
      for (Transfer& p : prefetches)
        if (p.consumer < 0 && p.tensor.recorded == id.recorded && p.tensor.k == id.k)
          p.consumer = static_cast<int>(ops.size());
    }
    ops.push_back({i, duration(op), static_cast<double>(gpu_bytes_ + output_bytes(op))});
    compute_ms_ += duration(op);
    apply(op);
  }
  for (const Transfer& p : prefetches)
    if (p.consumer < 0) return fail(p.op_index, "no op after it reads the prefetched tensor");
  if (!finished()) {
    OffloadReplay replay;
    replay.problem = "the sequence does not end with only the input gradient stored";
    return replay;
  }
  return std::nullopt;
}

// Compute as late as memory allows, prefetches as late as their readers and the link allow.
// `scheduled` holds the prefetches placed so far, last in sequence order first; the others still
// wait behind one whose reader comes earlier.
std::optional<OffloadReplay> Replayer::schedule_backward(const std::vector<BackwardOp>& ops,
                                                         std::vector<Transfer> prefetches,
                                                         double& before_backward) {
  const double inverse_beta = beta_ > 0 ? 1 / beta_ : kNever;
  std::vector<double> reverse_end(ops.size(), 0.0);
  std::vector<Transfer> scheduled;
  int next = static_cast<int>(prefetches.size()) - 1;
  double link_reverse_free = 0, reverse_time = 0;
  auto schedule_ready = [&](int after) {
    for (; next >= 0 && prefetches[next].consumer > after; --next) {
      Transfer p = prefetches[next];
      p.start_ms = std::max(reverse_end[p.consumer], link_reverse_free);
      p.end_ms = p.start_ms + static_cast<double>(p.bytes) * inverse_beta;
      link_reverse_free = p.end_ms;
      scheduled.push_back(p);
    }
  };
  for (int b = static_cast<int>(ops.size()) - 1; b >= 0; --b) {
    schedule_ready(b);
    double waiting = 0;  // prefetched before this op's end whatever the timing
    for (int j = 0; j <= next; ++j)
      if (prefetches[j].consumer > b) waiting += static_cast<double>(prefetches[j].bytes);
    const double fixed = ops[b].need_bytes + waiting;
    const double start = earliest_fit(scheduled, fixed, budget_, reverse_time);
    if (start == kNever)
      return fail(ops[b].op_index, "needs " + std::to_string(whole_bytes(fixed)) +
                                       " bytes, more than the budget even with its prefetches "
                                       "delayed");
    hold(fixed, scheduled, start);
    reverse_end[b] = start + ops[b].duration_ms;
    reverse_time = reverse_end[b];
  }
  schedule_ready(-1);
  // What the link must prefetch before the loss backward, after the offloads (OR.3).
  before_backward = std::max(0.0, link_reverse_free - reverse_time);
  reverse_time_ = reverse_time;
  return std::nullopt;
}

OffloadReplay Replayer::run() {
  OffloadReplay replay;
  peak_ = peak_at_completion_ = static_cast<double>(gpu_bytes_);
  if (!fits(peak_, budget_)) {
    replay.problem = "the chain input and the loss gradient alone exceed the budget";
    return replay;
  }
  if (auto failed = forward_phase(replay)) return *failed;
  std::vector<BackwardOp> ops;
  std::vector<Transfer> prefetches;
  if (auto failed = list_backward(ops, prefetches)) return *failed;
  double before_backward = 0;
  if (auto failed = schedule_backward(ops, std::move(prefetches), before_backward)) return *failed;
  const double backward_start = offloads_end_ + before_backward;
  replay.valid = true;
  replay.total_ms = backward_start + reverse_time_;
  replay.backward_ms = replay.total_ms - replay.forward_ms;
  replay.idle_ms = std::max(0.0, replay.total_ms - compute_ms_);
  replay.peak_bytes = whole_bytes(peak_);
  replay.peak_bytes_release_at_completion = whole_bytes(peak_at_completion_);
  return replay;
}
}  // namespace

madpipe::remat::OffloadReplay madpipe::remat::replay_offload_sequence(const RematChain& chain,
                                                                      const RematSequence& sequence,
                                                                      std::int64_t budget_bytes,
                                                                      double host_bytes_per_ms) {
  return Replayer(chain, sequence, budget_bytes, host_bytes_per_ms).run();
}
