#pragma once

#include "plan/plan.hpp"

#include <string>
#include <vector>

namespace madpipe::plan {

// What a runtime executes: for every GPU a flat list of instructions for one training step of N
// micro-batches (warm-up and drain included), lowered from a plan's periodic pattern. The
// executor holds no schedule logic; it interprets this list.
enum class InstrKind { Forward, Backward, SendAct, RecvAct, SendGrad, RecvGrad, OptimizerStep };

struct Instr {
  InstrKind kind = InstrKind::Forward;
  int stage = 0;        // for transfers: the stage whose output (or its gradient) moves
  int micro_batch = 0;  // -1 for OptimizerStep
  int peer = -1;        // the other GPU of a transfer
  int slot = -1;        // Forward/Backward: activation slot of the stage, < Program::slots[stage]
};

struct Program {
  int micro_batches = 0;
  std::vector<std::vector<Instr>> per_gpu;
  std::vector<int> slots;  // activation slots each stage needs (its NCA within the step)
};

bool operator==(const Instr& a, const Instr& b);

// Round-trip tokens: "F2.7", "B2.7", "SEND_ACT2.7>1", "RECV_ACT2.7<0", "SEND_GRAD2.7>0",
// "RECV_GRAD2.7<1", "OPT2". Slots are not part of the token.
std::string to_string(const Instr& instr);
Instr instr_from_string(const std::string& token);  // throws Error{InvalidInput}

// Lowers the plan's pattern for micro-batches 0..N-1: each GPU runs its F and B ops in the order
// of their planned times; a receive comes right before the op that needs the data and a send right
// after the op that produced it (sends do not block); each stage's optimizer step comes last.
Program lower(const Plan& plan, int micro_batches);

// Runs the program symbolically with non-blocking sends and blocking receives. Returns an empty
// string when every GPU reaches its end, else a report: for each GPU its position, the
// instruction it waits at (marked "<-- stuck") and what it waits for.
std::string dry_run(const Program& program);

}  // namespace madpipe::plan
