#include "schedule/pattern.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <tuple>
#include <utility>

namespace {
struct KindName {
  madpipe::schedule::OpKind kind;
  const char* name;
};
constexpr std::array<KindName, 5> kKindNames{{{madpipe::schedule::OpKind::F, "F"},
                                              {madpipe::schedule::OpKind::B, "B"},
                                              {madpipe::schedule::OpKind::SendAct, "SEND_ACT"},
                                              {madpipe::schedule::OpKind::SendGrad, "SEND_GRAD"},
                                              {madpipe::schedule::OpKind::W, "W"}}};
}  // namespace

bool madpipe::schedule::operator==(const Link& a, const Link& b) {
  return a.a == b.a && a.b == b.b;
}

bool madpipe::schedule::operator==(const Op& a, const Op& b) {
  return std::tie(a.kind, a.stage, a.gpu, a.link.a, a.link.b, a.start_ms, a.duration_ms, a.shift) ==
         std::tie(b.kind, b.stage, b.gpu, b.link.a, b.link.b, b.start_ms, b.duration_ms, b.shift);
}

bool madpipe::schedule::operator==(const Pattern& a, const Pattern& b) {
  return a.period_ms == b.period_ms && a.k == b.k && a.ops == b.ops;
}

const char* madpipe::schedule::to_string(OpKind kind) {
  for (const KindName& entry : kKindNames)
    if (entry.kind == kind) return entry.name;
  MADPIPE_UNREACHABLE("unknown op kind");
}

madpipe::schedule::OpKind madpipe::schedule::op_kind_from_string(const std::string& s) {
  for (const KindName& entry : kKindNames)
    if (s == entry.name) return entry.kind;
  throw Error(ErrorKind::InvalidInput, "", "kind",
              "unknown op kind '" + s + "' (valid: F, B, SEND_ACT, SEND_GRAD, W)");
}

double madpipe::schedule::compute_op_ms(const Stage& stage, OpKind kind) {
  if (kind == OpKind::F) return stage.forward_ms;
  return kind == OpKind::W ? stage.backward_weight_ms : stage.backward_input_ms();
}

bool madpipe::schedule::is_transfer(OpKind kind) {
  return kind == OpKind::SendAct || kind == OpKind::SendGrad;
}

std::string madpipe::schedule::op_token(OpKind kind, int stage) {
  return std::string(to_string(kind)) + std::to_string(stage);
}

std::string madpipe::schedule::op_token(OpKind kind, int stage, int micro_batch) {
  return op_token(kind, stage) + "." + std::to_string(micro_batch);
}

int madpipe::schedule::resource_of(const Op& op, int num_gpus) {
  if (is_transfer(op.kind)) return num_gpus + op.link.a * num_gpus + op.link.b;
  return op.gpu;
}

std::vector<madpipe::schedule::Op> madpipe::schedule::micro_batch_chain(
    const std::vector<Stage>& stages, const Platform& platform) {
  std::vector<Op> chain;
  const int n = static_cast<int>(stages.size());
  auto link_between = [&](int s) {
    return Link{std::min(stages[s].gpu, stages[s + 1].gpu),
                std::max(stages[s].gpu, stages[s + 1].gpu)};
  };
  for (int s = 0; s < n; ++s) {
    Op f;
    f.kind = OpKind::F;
    f.stage = s;
    f.gpu = stages[s].gpu;
    f.duration_ms = stages[s].forward_ms;
    chain.push_back(f);
    if (s + 1 < n && stages[s + 1].gpu != stages[s].gpu) {
      Op send;
      send.kind = OpKind::SendAct;
      send.stage = s;
      send.link = link_between(s);
      send.duration_ms =
          transfer_ms(stages[s].output_bytes, platform, stages[s].gpu, stages[s + 1].gpu);
      chain.push_back(send);
    }
  }
  for (int s = n - 1; s >= 0; --s) {
    if (s + 1 < n && stages[s + 1].gpu != stages[s].gpu) {
      Op send;
      send.kind = OpKind::SendGrad;
      send.stage = s;
      send.link = link_between(s);
      send.duration_ms =
          transfer_ms(stages[s].output_bytes, platform, stages[s + 1].gpu, stages[s].gpu);
      chain.push_back(send);
    }
    Op b;
    b.kind = OpKind::B;
    b.stage = s;
    b.gpu = stages[s].gpu;
    b.duration_ms = stages[s].backward_input_ms();
    chain.push_back(b);
  }
  return chain;
}

std::vector<madpipe::schedule::Op> madpipe::schedule::weight_ops(const std::vector<Stage>& stages) {
  std::vector<Op> ops;
  for (int s = static_cast<int>(stages.size()) - 1; s >= 0; --s) {
    if (!stages[s].splits_backward()) continue;
    Op w;
    w.kind = OpKind::W;
    w.stage = s;
    w.gpu = stages[s].gpu;
    w.duration_ms = stages[s].backward_weight_ms;
    ops.push_back(w);
  }
  return ops;
}

// Splits t into q*period + r with r in [0, period); guards against r == period from rounding.
static std::pair<long long, double> split_period(double t, double period) {
  double q = std::floor(t / period);
  double r = t - q * period;
  if (r >= period) {
    r -= period;
    q += 1;
  }
  if (r < 0) r = 0;
  return {static_cast<long long>(q), r};
}

void madpipe::schedule::normalize(Pattern& pattern) {
  if (pattern.period_ms <= 0) return;
  for (Op& op : pattern.ops) {
    auto [q, r] = split_period(op.start_ms, pattern.period_ms);
    op.start_ms = r;
    op.shift -= static_cast<int>(q) * pattern.k;
  }
  int base = INT_MAX;
  for (const Op& op : pattern.ops)
    if (op.kind == OpKind::B && op.stage == 0) base = std::min(base, op.shift);
  if (base == INT_MAX) return;
  for (Op& op : pattern.ops) op.shift -= base;
}

madpipe::schedule::Pattern madpipe::schedule::pattern_from_absolute_times(std::vector<Op> ops,
                                                                          double period_ms) {
  Pattern pattern;
  pattern.period_ms = period_ms;
  pattern.k = 1;
  for (Op& op : ops) op.shift = 0;
  pattern.ops = std::move(ops);
  normalize(pattern);
  sort_ops(pattern);
  return pattern;
}

// The order of a pattern's ops: by start, computations before transfers, then by resource, stage,
// kind and micro-batch shift.
static bool op_before(const madpipe::schedule::Op& x, const madpipe::schedule::Op& y) {
  using madpipe::schedule::OpKind;
  if (x.start_ms != y.start_ms) return x.start_ms < y.start_ms;
  const bool tx = x.kind == OpKind::SendAct || x.kind == OpKind::SendGrad;
  const bool ty = y.kind == OpKind::SendAct || y.kind == OpKind::SendGrad;
  return std::make_tuple(tx, x.gpu, x.link.a, x.link.b, x.stage, static_cast<int>(x.kind),
                         x.shift) <
         std::make_tuple(ty, y.gpu, y.link.a, y.link.b, y.stage, static_cast<int>(y.kind), y.shift);
}

void madpipe::schedule::sort_ops(Pattern& pattern) {
  // Patterns built from sorted ones (a k-periodic variant's copies) come nearly in order: only
  // starts that rounding made equal are out of it. Insertion sort takes those in linear time;
  // past a few moves per op, the rest goes to a stable sort (insertion sort is stable too, so the
  // order is the same either way).
  std::vector<Op>& ops = pattern.ops;
  const std::size_t most_moves = 4 * ops.size() + 16;
  std::size_t moves = 0;
  for (std::size_t i = 1; i < ops.size(); ++i) {
    if (!op_before(ops[i], ops[i - 1])) continue;
    Op op = ops[i];
    std::size_t j = i;
    for (; j > 0 && op_before(op, ops[j - 1]); --j) ops[j] = ops[j - 1];
    ops[j] = op;
    moves += i - j;
    if (moves > most_moves) {
      std::stable_sort(ops.begin(), ops.end(), op_before);
      return;
    }
  }
}
