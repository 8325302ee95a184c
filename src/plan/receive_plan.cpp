#include "plan/receive_plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace madpipe::plan {
namespace {

bool is_compute(InstrKind kind) {
  return kind == InstrKind::Forward || kind == InstrKind::Backward;
}

using ComputeKey = std::tuple<bool, int, int>;  // (is backward, stage, micro-batch)

}  // namespace

ReceivePlan plan_receives(const std::vector<Instr>& list,
                          const std::vector<std::int64_t>& message_bytes, bool train, int lookahead,
                          int max_placed) {
  ReceivePlan plan;
  std::vector<madpipe::arena::Buffer> buffers;
  std::map<ComputeKey, int> compute_at;  // a step runs each (F or B, stage, micro-batch) once
  for (int k = 0; k < static_cast<int>(list.size()); ++k)
    if (is_compute(list[k].kind))
      compute_at.emplace(
          ComputeKey{list[k].kind == InstrKind::Backward, list[k].stage, list[k].micro_batch}, k);
  auto find = [&](int from, InstrKind kind, int stage, int micro_batch) {
    auto it = compute_at.find({kind == InstrKind::Backward, stage, micro_batch});
    return it != compute_at.end() && it->second >= from ? it->second : -1;
  };
  // (activation, stage) -> where the previous such message received was first used.
  std::map<std::pair<bool, int>, int> previous_use;
  for (int k = 0; k < static_cast<int>(list.size()); ++k) {
    const Instr& r = list[k];
    const bool act = r.kind == InstrKind::RecvAct;
    if (!act && (r.kind != InstrKind::RecvGrad || !train)) continue;
    // The activation of stage s feeds stage s + 1; a gradient of stage s's output feeds B of s.
    const int user_stage = act ? r.stage + 1 : r.stage;
    const int first_use =
        find(k, act ? InstrKind::Forward : InstrKind::Backward, user_stage, r.micro_batch);
    const int last_use =
        act && train ? find(k, InstrKind::Backward, user_stage, r.micro_batch) : first_use;
    if (first_use < 0 || last_use < 0)
      throw Error(ErrorKind::InvalidInput, "", "program",
                  "the receive " + to_string(r) + " has no " + (act ? "forward" : "backward") +
                      (act && train ? " and backward" : "") + " of stage " +
                      std::to_string(user_stage) + " after it");
    int post = first_use;
    for (int seen = 0; post > 0 && seen < lookahead;)
      if (is_compute(list[--post].kind)) ++seen;
    // One message of each kind in transit per cut, as the memory model counts its buffers: not
    // posted before the previous one has been used.
    const auto previous = previous_use.find({act, r.stage});
    if (train && lookahead < std::numeric_limits<int>::max() && previous != previous_use.end())
      post = std::max(post, previous->second + 1);
    previous_use[{act, r.stage}] = first_use;
    post = std::min(post, k);  // posted before it is waited for
    const std::int64_t size = message_bytes.at(static_cast<std::size_t>(r.stage));
    ReceiveSlot slot;
    slot.instr = k;
    slot.post_before = post;
    slot.last_use = last_use;
    slot.bytes = (size + kReceiveAlignment - 1) / kReceiveAlignment * kReceiveAlignment;
    plan.slots.push_back(slot);
  }
  // One posting order per peer, the order it sends in: a receive is posted no later than any
  // receive from the same peer that it sends after.
  std::map<int, std::vector<std::pair<int, int>>> from_peer;  // peer -> (order, slot index)
  for (int j = 0; j < static_cast<int>(plan.slots.size()); ++j) {
    const Instr& r = list[plan.slots[j].instr];
    from_peer[r.peer].push_back({r.sequence >= 0 ? r.sequence : plan.slots[j].instr, j});
  }
  for (auto& [peer, order] : from_peer) {
    std::sort(order.begin(), order.end());
    // In training, a receive waits for those the peer sends before it (not before its own wait):
    // pulling those earlier instead would post two messages of one kind at once where a rank
    // sends two stages' messages to this one (the memory model counts one).
    if (train && lookahead < std::numeric_limits<int>::max())
      for (std::size_t q = 1; q < order.size(); ++q) {
        ReceiveSlot& slot = plan.slots[order[q].second];
        slot.post_before = std::max(
            slot.post_before, std::min(plan.slots[order[q - 1].second].post_before, slot.instr));
      }
    for (std::size_t q = order.size() - 1; q-- > 0;) {
      int& post = plan.slots[order[q].second].post_before;
      post = std::min(post, plan.slots[order[q + 1].second].post_before);
    }
  }
  for (const ReceiveSlot& slot : plan.slots)
    buffers.push_back({to_string(list[slot.instr]), slot.bytes, slot.post_before, slot.last_use});
  if (static_cast<int>(buffers.size()) > max_placed) {
    for (ReceiveSlot& slot : plan.slots) slot.offset = -1;
    return plan;
  }
  plan.addresses = best_greedy_address_plan(buffers);
  for (std::size_t i = 0; i < plan.slots.size(); ++i)
    plan.slots[i].offset = plan.addresses.offsets[i];
  return plan;
}

}  // namespace madpipe::plan
