#pragma once

#include "arena/address_plan.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/pattern.hpp"

#include <string>
#include <vector>

namespace madpipe::arena {

// Static memory of a stage in the steady state of a periodic schedule (modulo allocation): the
// same offsets serve every period.
//
// In a period a stage runs its F and B ops of the pattern in the order of their start times. Each
// op expands into the nodes of one micro-batch's part of the stage's sequence
// (micro_batch_tensor_graph): F into its forward part, B into its backward part. Micro-batch m
// makes its activations in F of period (m - F.shift)/k and frees them in B of a later period, so
// lifetimes cross period boundaries. The timeline is a circle of `periods` periods, the fewest
// that hold the longest lifetime unless more are asked for; there micro-batch m uses slot set
// m mod (periods * k), whose buffers have the same offsets in every turn of the circle, and a
// buffer may wrap around its end (Buffer::first > last). A plan of these buffers is valid in every
// period. More periods on the circle can need less memory: micro-batches that are never in flight
// together may share offsets only when they have slot sets of their own (with k = 2 and 3 in
// flight, the 4 slot sets of the fewest periods pairwise meet; 6 slot sets need not).
struct SteadyStateBuffers {
  std::vector<Buffer> buffers;     // named "<tensor>@s<slot set>"; 0-byte tensors left out
  std::vector<std::string> steps;  // the op at each timestep of the circle ("F3all@s1")
  int periods = 0;                 // pattern periods on the circle
  int slot_sets = 0;               // periods * k: micro-batch m uses slot set m mod slot_sets

  int timesteps() const noexcept { return static_cast<int>(steps.size()); }
};

// The buffers of `stage` in the steady state of `pattern`, on a circle of `periods` periods (0:
// the fewest). Throws Error{InvalidInput} when the stage has no F op, an F without its B (same
// shift modulo k), a B that does not run after its F, lifetimes spanning more than 64 periods, or
// `periods` below the fewest or above 64.
SteadyStateBuffers steady_state_buffers(const remat::RematChain& chain,
                                        const remat::RematSequence& sequence,
                                        const schedule::Pattern& pattern, int stage,
                                        int periods = 0);

// A 1F1B steady state of stage 0 with `in_flight` micro-batches: in period j, the forward of
// micro-batch j + in_flight - 1, then the backward of micro-batch j.
schedule::Pattern one_f_one_b_stage_pattern(int in_flight);

// The plan of circular buffers replayed over `turns` turns of a circle of `timesteps` steps on a
// linear timeline, each copy at the offset of its buffer: a wrapping buffer of turn r runs into
// turn r + 1 (the last turn's past the end). The circular plan is valid if and only if this one
// is, for turns >= 2.
AddressPlan unroll_circular_plan(const AddressPlan& plan, int timesteps, int turns);

}  // namespace madpipe::arena
