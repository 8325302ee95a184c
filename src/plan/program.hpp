#pragma once

#include "core/names.hpp"
#include "plan/plan.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace madpipe::plan {

// What a runtime executes: for every GPU a flat list of instructions for N micro-batches (warm-up
// and drain included), lowered from a plan's periodic pattern. The list is the executor's whole
// contract: every compute op, every local hand-over between two stages of one GPU, every send,
// every receive with its buffer, and (when asked for) every optimizer step. The executor holds no
// schedule logic and reads nothing of the plan to run it.
//
// Data moves through named places: the output of F s.i (and what its backward needs) stays in the
// stage's activation slot `slot` until B s.i; the input of F s.i (s > 0) and the gradient that
// B s.i needs (s not last) are delivered by a hand-over or a receive before the op runs.
enum class InstrKind {
  Forward,        // F s.i: input from the batch (s = 0) or delivered; output kept in `slot`
  Backward,       // B s.i: gradient delivered (s not last); frees `slot`; yields s-1's gradient
  HandAct,        // output of F s.i to F s+1.i on the same GPU
  HandGrad,       // gradient of stage s's output (from B s+1.i) to B s.i on the same GPU
  SendAct,        // output of F s.i to `peer` (does not wait)
  SendGrad,       // gradient of stage s's output (from B s+1.i) to `peer` (does not wait)
  PostRecvAct,    // posts the receive of s's output for micro-batch i from `peer` into `buffer`
  PostRecvGrad,   // the same for the gradient of s's output
  RecvAct,        // waits for the posted receive; delivers the input of F s+1.i
  RecvGrad,       // waits for the posted receive; delivers the gradient B s.i needs
  OptimizerStep,  // steps stage s's optimizer after the last backward of update `micro_batch`
  // W s.i of a split stage (Stage::splits_backward): the weight gradient of micro-batch i, after
  // B s.i, which then computed the input gradient only; frees what it kept for W.
  BackwardWeight,
};

struct Instr {
  InstrKind kind = InstrKind::Forward;
  int stage = 0;        // for transfers and hand-overs: the stage whose output (or gradient) moves
  int micro_batch = 0;  // OptimizerStep: the update's number (micro-batches u·m .. u·m + m - 1)
  int peer = -1;        // the other GPU of a send or receive
  int slot = -1;        // F, B, HandAct, SendAct: the activation slot, < Program::slots[stage]
  int buffer = -1;      // PostRecv*, Recv*: index in Program::receive_buffers[gpu]
  int sequence = -1;    // sends and receives: position among the messages of this GPU pair
};

// A receive buffer: its place in the GPU's receive arena and how long it is in use.
struct ReceiveBuffer {
  std::int64_t offset = -1;  // in the arena; -1: its own allocation
  std::int64_t bytes = 0;    // the message, rounded up to kReceiveAlignment (0: size unknown)
  int post = -1;             // index of its PostRecv instruction
  int last_use = -1;         // index of the instruction after which it is free
};

inline constexpr std::int64_t kReceiveAlignment = 256;  // bytes; CUDA allocations are 256-aligned

struct Program {
  int micro_batches = 0;
  bool train = true;             // forwards and backwards; false: forwards only (validation)
  int update_micro_batches = 0;  // optimizer steps in the program every m micro-batches; 0: none
  std::vector<std::vector<Instr>> per_gpu;
  std::vector<int> slots;                                   // activation slots each stage needs
  std::vector<std::vector<ReceiveBuffer>> receive_buffers;  // per GPU
  std::vector<std::int64_t> arena_bytes;  // per GPU: its receive arena (0: no offsets planned)
  // Per GPU, per instruction: for a send, the index of the instruction after which the runtime
  // completes it (the list's size: at the end), from send_completions (program_memory.hpp);
  // -1 for other instructions.
  std::vector<std::vector<int>> send_completions;
};

bool operator==(const Instr& a, const Instr& b);

inline bool is_send(InstrKind kind) {
  return kind == InstrKind::SendAct || kind == InstrKind::SendGrad;
}
inline bool is_post(InstrKind kind) {
  return kind == InstrKind::PostRecvAct || kind == InstrKind::PostRecvGrad;
}
inline bool is_wait(InstrKind kind) {
  return kind == InstrKind::RecvAct || kind == InstrKind::RecvGrad;
}
// A transfer or hand-over of a gradient (else of an activation).
inline bool carries_gradient(InstrKind kind) {
  return kind == InstrKind::SendGrad || kind == InstrKind::PostRecvGrad ||
         kind == InstrKind::RecvGrad || kind == InstrKind::HandGrad;
}

// Round-trip tokens: "F2.7", "B2.7", "HAND_ACT2.7", "HAND_GRAD2.7", "SEND_ACT2.7>1",
// "SEND_GRAD2.7>0", "POST_RECV_ACT2.7<0", "POST_RECV_GRAD2.7<1", "RECV_ACT2.7<0",
// "RECV_GRAD2.7<1", "OPT2.0". Slots, buffers and sequence numbers are not part of the token.
std::string to_string(const Instr& instr);
Instr instr_from_string(const std::string& token);  // throws Error{InvalidInput}

// Where received activations and gradients land (the runtime's --receive-buffers).
enum class ReceivePosting {
  Arena,    // each receive posted `lookahead` compute ops before its use, at a planned offset
  Upfront,  // every receive posted at the start, each into its own allocation
};
inline constexpr Named<ReceivePosting> kReceivePostingNames[] = {
    {ReceivePosting::Arena, "arena"}, {ReceivePosting::Upfront, "upfront"}};

struct LowerOptions {
  int micro_batches = 1;
  bool train = true;
  // > 0: an OptimizerStep for every stage after the last backward of each m micro-batches
  // (asynchronous training updates inside the program); 0: the caller steps after the program.
  int update_micro_batches = 0;
  ReceivePosting posting = ReceivePosting::Arena;
  int lookahead = 2;  // compute ops (F and B) a receive is posted before the one that needs it
  // Size of stage s's output (its gradient has the same size). Empty: offsets are not planned.
  std::vector<std::int64_t> message_bytes;
  int max_placed = 4096;  // receives a GPU may have for offsets to be planned (first-fit is O(n²))
};

// Lowers the plan's pattern for micro-batches 0..N-1: each GPU runs its F and B ops in the order
// of their planned times, and in a synchronous training step (train, no updates inside) its W
// ops where simulate()'s Asap step runs them (in the bubbles, within the plan's predicted
// memory), else after their B as planned; a receive is waited for right before the op that needs
// the data, a send or a hand-over comes right after the op that produced it (sends do not block).
// Each GPU posts its receives from a peer in the order the peer sends them (one order per GPU pair,
// which an NCCL transport needs), at the latest `lookahead` compute ops before their use. Throws
// Error{InvalidInput} on bad options.
Program lower(const Plan& plan, const LowerOptions& options);
Program lower(const Plan& plan, int micro_batches);  // training, default options

// The directed GPU pairs (from, to) that exchange messages under `plan`: an activation goes from
// stage s's GPU to stage s+1's and its gradient back, when the two differ. Sorted; the same on
// every rank (a transport that needs one channel per pair, as NCCL's, creates them from it).
std::vector<std::pair<int, int>> message_channels(const Plan& plan);

// Runs the program symbolically with non-blocking sends, blocking receives, and after each
// instruction a blocking wait for the sends `send_completions` completes there, which returns
// once the peer has posted their receives (or received them). Returns an empty
// string when every GPU reaches its end with every message received, the k-th message from one
// GPU to another posted and received as the k-th, and every op finding its data delivered; else
// a report: for a deadlock, each GPU's position, the instruction it waits at (marked
// "<-- stuck") and what it waits for.
std::string dry_run(const Program& program);

}  // namespace madpipe::plan
