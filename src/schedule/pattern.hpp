#pragma once

#include "core/platform.hpp"
#include "schedule/stage.hpp"

#include <string>
#include <vector>

namespace madpipe::schedule {

// JSON and token spellings come from one table in pattern.cpp: "F" "B" "SEND_ACT" "SEND_GRAD"
// "W". W is the weight gradient of a stage whose backward is split (Stage::splits_backward): its
// B then computes the input gradient only, and W of a micro-batch runs any time after its B.
enum class OpKind { F, B, SendAct, SendGrad, W };

struct Link {
  int a = 0;  // a < b; one transfer at a time, either direction
  int b = 0;
};

// One operation of a k-periodic pattern: in period j it starts at j*period_ms + start_ms and
// processes micro-batch j*k + shift.
struct Op {
  OpKind kind = OpKind::F;
  int stage = 0;
  int gpu = -1;  // F, B and W
  Link link{};   // SEND_ACT and SEND_GRAD
  double start_ms = 0;
  double duration_ms = 0;
  int shift = 0;
};

struct Pattern {
  double period_ms = 0;
  int k = 1;
  std::vector<Op> ops;

  double normalized_period_ms() const noexcept { return period_ms / k; }
};

bool operator==(const Link& a, const Link& b);
bool operator==(const Op& a, const Op& b);
bool operator==(const Pattern& a, const Pattern& b);

const char* to_string(OpKind kind);                // "F", "B", "SEND_ACT", "SEND_GRAD", "W"
OpKind op_kind_from_string(const std::string& s);  // throws Error{InvalidInput} listing valid names
bool is_transfer(OpKind kind);

// How long a compute op (F, B or W) of `stage` lasts: B is the input gradient alone when the
// stage splits its backward (backward_input_ms), W its backward_weight_ms.
double compute_op_ms(const Stage& stage, OpKind kind);

// Round-trip token of an op kind and stage, e.g. "F2", "SEND_ACT1"; with a micro-batch, "F2.7".
std::string op_token(OpKind kind, int stage);
std::string op_token(OpKind kind, int stage, int micro_batch);

// A resource is a GPU or a link; ids: GPU g -> g, link (a,b) -> num_gpus + a*num_gpus + b.
int resource_of(const Op& op, int num_gpus);

// The operations one micro-batch goes through, in dependency order:
// F0 [SEND_ACT0] F1 ... F(S-1) B(S-1) [SEND_GRAD(S-2)] B(S-2) ... B0.
// Transfers appear only between stages on different GPUs. Durations come from the stages and
// the bandwidth of each transfer's link (intra- or inter-node); B of a split stage lasts its
// backward_input_ms. start_ms and shift are 0. Each op depends on the one before it; the W ops of
// split stages are not in the chain (weight_ops).
std::vector<Op> micro_batch_chain(const std::vector<Stage>& stages, const Platform& platform);

// The W op of each split stage, last stage first (the order in which their B ops run); each
// depends on B of its stage only. start_ms and shift are 0.
std::vector<Op> weight_ops(const std::vector<Stage>& stages);

// Builds a 1-periodic pattern of period T from absolute start times of micro-batch 0's ops
// (given in start_ms): start becomes t mod T and the shift -floor(t / T), then all shifts move
// together so that B of stage 0 has shift 0 (the thesis' convention).
Pattern pattern_from_absolute_times(std::vector<Op> ops, double period_ms);

// Moves every op's start into [0, period) adjusting shifts, then normalises shifts so that the
// smallest shift of B of stage 0 is 0. Works for any k.
void normalize(Pattern& pattern);

// Sorts ops by (start, resource kind, stage, kind) so that output is deterministic.
void sort_ops(Pattern& pattern);

}  // namespace madpipe::schedule
