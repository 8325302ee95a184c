#pragma once

#include "arena/address_plan.hpp"
#include "plan/program.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::plan {

// Where and when a rank's receive buffers live (the runtime's arena, runtime.md), the part of
// lowering (program.hpp) that places receives: every activation and gradient the rank receives
// gets a planned offset in one arena (OLLA's address plan on the rank's instruction list,
// address_plan.hpp). A receive is posted `lookahead` compute instructions (forwards and
// backwards) before the instruction that first needs it, so that the transfer overlaps them, but
// in training not before the previous message of its kind and stage has been used (one message
// in transit per cut and direction, as the memory model counts buffers), and no later than any
// receive from the same peer that comes after it in the peer's sending order (Instr::sequence; list
// order when unset): one order per GPU pair, which may post earlier than the rule above. An
// unbounded lookahead (std::numeric_limits<int>::max()) posts every receive at the start. Its
// buffer is live until its last use: the backward of its micro-batch in training (autograd keeps a
// stage's input), the forward in validation, the backward for a gradient.
struct ReceiveSlot {
  int instr = -1;       // index of the RecvAct / RecvGrad instruction in the rank's list
  int post_before = 0;  // posted just before the instruction of this index runs
  int last_use = 0;     // index of the instruction after which the buffer is free
  std::int64_t offset = 0;
  std::int64_t bytes = 0;  // the message, rounded up to the arena's alignment
};

struct ReceivePlan {
  std::vector<ReceiveSlot> slots;  // in instruction order
  // The placement the offsets come from (timestep = instruction); without placement, empty and
  // every offset -1.
  arena::AddressPlan addresses;
  bool placed() const noexcept { return !addresses.offsets.empty() || slots.empty(); }
  std::int64_t arena_bytes() const noexcept { return addresses.arena_bytes; }
};

// Plans the receives of `list` (one rank's instructions, receives marking where data is waited
// for, before any PostRecv is inserted); `message_bytes[s]` is the
// size of stage s's output (its gradient has the same size). Training programs keep an activation
// until the backward; validation programs (train = false) run no backward and receive no
// gradient. Offsets are planned when there are at most `max_placed` receives (first-fit is
// quadratic; a long asynchronous program is left to the allocator). Throws Error{InvalidInput}
// when a receive has no instruction that uses it.
ReceivePlan plan_receives(const std::vector<Instr>& list,
                          const std::vector<std::int64_t>& message_bytes, bool train,
                          int lookahead = 2, int max_placed = 4096);

}  // namespace madpipe::plan
