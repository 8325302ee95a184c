#pragma once

// A synchronous step as data: the compute ops of each GPU in the order it runs them, for one
// number of micro-batches. Published step schedules that order their warm-up and drain
// otherwise than their steady state (Megatron's interleaved 1F1B, ZB-V) are such orders.

#include "schedule/pattern.hpp"
#include "schedule/stage.hpp"

#include <optional>
#include <string>
#include <vector>

namespace madpipe::schedule {

// One op of a step: F, B or W (on a GPU), SEND_ACT or SEND_GRAD (on a link) of `stage` for
// `micro_batch`.
struct StepAction {
  OpKind kind = OpKind::F;
  int stage = 0;
  int micro_batch = 0;
};

// The transfers one link carries, in order.
struct LinkOrder {
  Link link;
  std::vector<StepAction> transfers;
};

struct StepOrder {
  int micro_batches = 0;
  std::vector<std::vector<StepAction>> per_gpu;  // each GPU's F, B and W in running order
  // Optional: each link's transfers in order (the step ILP's). Empty: a free link carries, of
  // the transfers whose input is done, the one whose receiver comes soonest in its GPU's order.
  std::vector<LinkOrder> per_link;
};

bool operator==(const StepAction& a, const StepAction& b);
bool operator==(const LinkOrder& a, const LinkOrder& b);
bool operator==(const StepOrder& a, const StepOrder& b);

// "F2.7" <-> {F, 2, 7}, "SEND_ACT1.0" <-> {SendAct, 1, 0}; parse_step_action throws
// Error{InvalidInput} naming `field`.
std::string to_string(const StepAction& action);
StepAction parse_step_action(const std::string& token, const std::string& field);

// Megatron's interleaved 1F1B with whole backwards, as torch.distributed.pipelining's
// ScheduleInterleaved1F1B orders it: GPU g runs stages g, g + P, ... (its chunks), forwards in
// rounds of micro-batches through its chunks, a warm-up of (chunks - 1) * round + 2 (P - 1 - g)
// forwards, then one forward and one backward in turn. nullopt where the stages are not in that
// loop, some stage splits its backward, or micro_batches is not a multiple of its rounds
// (max(1, micro_batches / P)).
std::optional<StepOrder> interleaved_1f1b_order(const std::vector<Stage>& stages, int gpus,
                                                int micro_batches);

// ZB-V as torch.distributed.pipelining's ScheduleZBVZeroBubble orders it: GPU g runs stages g
// and 2P - 1 - g, each W right after its B in the steady state and the remaining ones at the end.
// nullopt where the stages are not in that V. A stage whose backward is whole has no W.
std::optional<StepOrder> zb_v_order(const std::vector<Stage>& stages, int gpus, int micro_batches);

}  // namespace madpipe::schedule
