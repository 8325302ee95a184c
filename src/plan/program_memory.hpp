#pragma once

#include "plan/plan.hpp"
#include "plan/program.hpp"

#include <cstdint>
#include <vector>

namespace madpipe::plan {

// Where a runtime completes each send of a program (waits until the peer has taken it). By the
// memory model a cut holds one sent message of each kind at a time, so each send completes
// before the sender makes the next message of its kind on that cut (the stage's next forward for
// an activation, the next backward for a gradient), when the whole program still runs with those
// waits (a symbolic run, receives posted as the program posts them). Else every send completes
// where it no longer waits on anybody: right after the first instruction of the sender that
// receives a message its peer sent once it had received this one (the peer's receipt happened
// before). Per GPU, per instruction of its list: for a send, the index of the instruction after
// which it completes, or the list's size (the program's end); -1 for other instructions.
std::vector<std::vector<int>> send_completions(const Program& program);

// What one GPU holds while it runs a lowered training program, by the memory model's terms
// (schedule/memory.hpp) applied instruction by instruction: a bound on what the runtime's
// tensors hold on that GPU, which completes each send at its send_completions point at the latest.
struct ProgramMemory {
  std::int64_t weights = 0;   // weight_copies times the weights of its stages
  std::int64_t receives = 0;  // the receive arena (0 without one: buffers count as in flight)
  // At the peak: the largest workspace of its stages (during an instruction), or the optimizer's
  // temporaries (during an optimizer step).
  std::int64_t transient = 0;
  // At the peak: activations kept for backwards, stage outputs and input gradients not yet sent
  // or handed over, receive buffers outside an arena.
  std::int64_t in_flight = 0;
  std::int64_t peak_bytes = 0;  // the sum of the above
  // The instruction of the peak (index in the GPU's list); -1: an optimizer step between
  // programs (the caller's, when the program has none), with nothing in flight.
  int peak_at = -1;
};

// One entry per GPU. Sizes come from the plan's stages (stored, output and workspace bytes). A
// stage's output counts until its send completes (it moves to the next stage's stored bytes when
// handed over locally), or until its backward with an operation sequence (remat, offload). An
// optimizer step's temporaries are bounded by twice its stage's weights (it updates one
// parameter tensor at a time, with at most two temporaries of its size).
// `data_bytes`: one micro-batch's data (input and target), made during the forward of the first
// stage and of the last one, which it adds to.
std::vector<ProgramMemory> program_memory(const Plan& plan, const Program& program,
                                          std::int64_t data_bytes = 0);

}  // namespace madpipe::plan
