#include "arena/modulo_memory.hpp"

#include "arena/tensor_graph.hpp"
#include "core/error.hpp"

#include <algorithm>

static int positive_mod(long long value, long long modulus) {
  const long long r = value % modulus;
  return static_cast<int>(r < 0 ? r + modulus : r);
}

namespace {
using madpipe::schedule::Op;
using madpipe::schedule::OpKind;

// One F or B op of the stage, where its part starts in the period.
struct PeriodPart {
  const madpipe::schedule::Op* op = nullptr;
  int offset = 0;  // timestep of its first node within the period
};

// The F op of a micro-batch class with its B: d periods after F, at the B part's offset.
struct FlightClass {
  PeriodPart forward, backward;
  long long periods_between = 0;
};
}  // namespace

static std::vector<PeriodPart> period_parts(const madpipe::schedule::Pattern& pattern, int stage,
                                            int forward_nodes, int backward_nodes) {
  std::vector<const madpipe::schedule::Op*> ops;
  for (const madpipe::schedule::Op& op : pattern.ops)
    if (op.stage == stage &&
        (op.kind == madpipe::schedule::OpKind::F || op.kind == madpipe::schedule::OpKind::B))
      ops.push_back(&op);
  std::stable_sort(ops.begin(), ops.end(),
                   [](const madpipe::schedule::Op* a, const madpipe::schedule::Op* b) {
                     return a->start_ms < b->start_ms;
                   });
  std::vector<PeriodPart> parts;
  int offset = 0;
  for (const madpipe::schedule::Op* op : ops) {
    parts.push_back({op, offset});
    offset += op->kind == madpipe::schedule::OpKind::F ? forward_nodes : backward_nodes;
  }
  return parts;
}

static std::vector<FlightClass> flight_classes(const std::vector<PeriodPart>& parts, int k,
                                               int stage) {
  auto fail = [&](const std::string& problem) {
    madpipe::throw_invalid("", "pattern", "stage " + std::to_string(stage) + ": " + problem);
  };
  std::vector<FlightClass> classes;
  for (const PeriodPart& f : parts) {
    if (f.op->kind != madpipe::schedule::OpKind::F) continue;
    const PeriodPart* b = nullptr;
    for (const PeriodPart& candidate : parts)
      if (candidate.op->kind == madpipe::schedule::OpKind::B &&
          positive_mod(candidate.op->shift, k) == positive_mod(f.op->shift, k))
        b = &candidate;
    if (b == nullptr) fail("F with shift " + std::to_string(f.op->shift) + " has no B");
    const long long between =
        (static_cast<long long>(f.op->shift) - static_cast<long long>(b->op->shift)) / k;
    if (between < 0 || (between == 0 && b->offset < f.offset))
      fail("B of shift " + std::to_string(b->op->shift) + " runs before its F");
    classes.push_back({f, *b, between});
  }
  if (classes.empty()) fail("has no F op");
  return classes;
}

madpipe::arena::SteadyStateBuffers madpipe::arena::steady_state_buffers(
    const madpipe::remat::RematChain& chain, const madpipe::remat::RematSequence& sequence,
    const madpipe::schedule::Pattern& pattern, int stage, int periods_on_circle) {
  const MicroBatchTensorGraph one = micro_batch_tensor_graph(chain, sequence);
  const int forward_nodes = one.forward_nodes;
  const int backward_nodes = static_cast<int>(one.graph.nodes.size()) - forward_nodes;
  const int k = std::max(1, pattern.k);
  const std::vector<PeriodPart> parts = period_parts(pattern, stage, forward_nodes, backward_nodes);
  const std::vector<FlightClass> classes = flight_classes(parts, k, stage);
  int period_steps = 0;
  for (const PeriodPart& part : parts)
    period_steps += part.op->kind == madpipe::schedule::OpKind::F ? forward_nodes : backward_nodes;

  // Timestep of node i of a micro-batch of class c whose F runs in period 0 (unbounded timeline).
  auto absolute = [&](const FlightClass& c, int i) {
    return i < forward_nodes
               ? static_cast<long long>(c.forward.offset + i)
               : c.periods_between * period_steps + c.backward.offset + (i - forward_nodes);
  };
  auto lifetime = [&](const FlightClass& c, const Tensor& tensor) {
    const long long first = tensor.producer < 0 ? c.forward.offset : absolute(c, tensor.producer);
    long long last = first;
    for (int consumer : tensor.consumers) last = std::max(last, absolute(c, consumer));
    return std::make_pair(first, last);
  };
  long long longest = 1;
  for (const FlightClass& c : classes)
    for (const Tensor& tensor : one.graph.tensors) {
      if (tensor.size_bytes == 0) continue;
      const auto [first, last] = lifetime(c, tensor);
      longest = std::max(longest, last - first + 1);
    }
  const long long fewest = (longest + period_steps - 1) / period_steps;
  if (fewest > 64)
    throw_invalid("", "pattern",
                  "stage " + std::to_string(stage) + ": lifetimes span " + std::to_string(fewest) +
                      " periods, more than 64");
  if (periods_on_circle != 0 && (periods_on_circle < fewest || periods_on_circle > 64))
    throw_invalid("", "periods",
                  "must be 0 or " + std::to_string(fewest) + "..64 (the longest lifetime spans " +
                      std::to_string(fewest) + "), got " + std::to_string(periods_on_circle));
  const long long periods = periods_on_circle == 0 ? fewest : periods_on_circle;

  SteadyStateBuffers result;
  result.periods = static_cast<int>(periods);
  result.slot_sets = result.periods * k;
  const long long circle = periods * period_steps;
  auto slot = [&](long long period, const madpipe::schedule::Op& op) {
    return "@s" + std::to_string(positive_mod(period * k + op.shift, result.slot_sets));
  };
  for (long long p = 0; p < periods; ++p)
    for (const PeriodPart& part : parts) {
      const bool forward = part.op->kind == madpipe::schedule::OpKind::F;
      for (int i = forward ? 0 : forward_nodes;
           i < (forward ? forward_nodes : forward_nodes + backward_nodes); ++i)
        result.steps.push_back(one.graph.nodes[static_cast<std::size_t>(i)].name +
                               slot(p, *part.op));
    }
  for (long long p = 0; p < periods; ++p)
    for (const FlightClass& c : classes)
      for (const Tensor& tensor : one.graph.tensors) {
        if (tensor.size_bytes == 0) continue;
        const auto [first, last] = lifetime(c, tensor);
        const long long shift = p * period_steps;
        result.buffers.push_back({tensor.name + slot(p, *c.forward.op), tensor.size_bytes,
                                  positive_mod(first + shift, circle),
                                  positive_mod(last + shift, circle)});
      }
  return result;
}

madpipe::schedule::Pattern madpipe::arena::one_f_one_b_stage_pattern(int in_flight) {
  if (in_flight < 1)
    throw_invalid("", "in_flight", "must be >= 1, got " + std::to_string(in_flight));
  madpipe::schedule::Pattern pattern;
  pattern.period_ms = 2;
  pattern.ops.push_back({madpipe::schedule::OpKind::F, 0, 0, {}, 0.0, 1.0, in_flight - 1});
  pattern.ops.push_back({madpipe::schedule::OpKind::B, 0, 0, {}, 1.0, 1.0, 0});
  return pattern;
}

madpipe::arena::AddressPlan madpipe::arena::unroll_circular_plan(const AddressPlan& plan,
                                                                 int timesteps, int turns) {
  AddressPlan unrolled = plan;
  unrolled.buffers.clear();
  unrolled.offsets.clear();
  for (int turn = 0; turn < turns; ++turn)
    for (std::size_t e = 0; e < plan.buffers.size(); ++e) {
      Buffer copy = plan.buffers[e];
      copy.name += "#" + std::to_string(turn);
      copy.first += turn * timesteps;
      copy.last += (wraps(plan.buffers[e]) ? turn + 1 : turn) * timesteps;
      unrolled.buffers.push_back(std::move(copy));
      unrolled.offsets.push_back(plan.offsets[e]);
    }
  unrolled.lower_bound_bytes = live_bytes_lower_bound(unrolled.buffers);
  return unrolled;
}
