#include "schedule/step_order.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>

namespace madpipe::schedule {

bool operator==(const StepAction& a, const StepAction& b) {
  return std::tie(a.kind, a.stage, a.micro_batch) == std::tie(b.kind, b.stage, b.micro_batch);
}

bool operator==(const LinkOrder& a, const LinkOrder& b) {
  return a.link == b.link && a.transfers == b.transfers;
}

bool operator==(const StepOrder& a, const StepOrder& b) {
  return a.micro_batches == b.micro_batches && a.per_gpu == b.per_gpu && a.per_link == b.per_link;
}

std::string to_string(const StepAction& action) {
  return op_token(action.kind, action.stage, action.micro_batch);
}

// The non-negative integer `text` spells, or -1.
static int parse_index(const std::string& text) {
  if (text.empty() || text.size() > 9) return -1;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  return std::stoi(text);
}

StepAction parse_step_action(const std::string& token, const std::string& field) {
  const auto bad = [&] {
    throw Error(ErrorKind::InvalidInput, "", field,
                "expected an op such as F2.7 (F, B, W, SEND_ACT or SEND_GRAD, then the stage and "
                "the micro-batch), got '" +
                    token + "'");
  };
  const std::size_t digit = token.find_first_of("0123456789");
  const std::size_t dot = token.find('.');
  if (digit == std::string::npos || digit == 0 || dot == std::string::npos || dot < digit) bad();
  StepAction action;
  const std::string kind = token.substr(0, digit);
  if (kind == "F")
    action.kind = OpKind::F;
  else if (kind == "B")
    action.kind = OpKind::B;
  else if (kind == "W")
    action.kind = OpKind::W;
  else if (kind == "SEND_ACT")
    action.kind = OpKind::SendAct;
  else if (kind == "SEND_GRAD")
    action.kind = OpKind::SendGrad;
  else
    bad();
  action.stage = parse_index(token.substr(digit, dot - digit));
  action.micro_batch = parse_index(token.substr(dot + 1));
  if (action.stage < 0 || action.micro_batch < 0) bad();
  return action;
}

namespace {
// Appends a GPU's ops with per-stage micro-batch counters, as the published generators count.
class RankOps {
 public:
  explicit RankOps(std::vector<StepAction>& out) : out_(out) {}
  void add(OpKind kind, int stage) {
    out_.push_back({kind, stage, next_[{static_cast<int>(kind), stage}]++});
  }

 private:
  std::vector<StepAction>& out_;
  std::map<std::pair<int, int>, int> next_;  // (kind, stage) -> its next micro-batch
};
}  // namespace

std::optional<StepOrder> interleaved_1f1b_order(const std::vector<Stage>& stages, int gpus,
                                                int micro_batches) {
  const int num_stages = static_cast<int>(stages.size());
  if (gpus < 1 || micro_batches < 1 || num_stages % gpus != 0) return std::nullopt;
  for (int s = 0; s < num_stages; ++s)
    if (stages[s].gpu != s % gpus || stages[s].splits_backward()) return std::nullopt;
  const int chunks = num_stages / gpus;
  const int rounds = std::max(1, micro_batches / gpus);
  if (micro_batches % rounds != 0) return std::nullopt;
  const int per_round = micro_batches / rounds;
  const int total = micro_batches * chunks;
  StepOrder order;
  order.micro_batches = micro_batches;
  order.per_gpu.resize(gpus);
  for (int g = 0; g < gpus; ++g) {
    const int warmup = std::min((chunks - 1) * per_round + 2 * (gpus - 1 - g), total);
    const auto forward_stage = [&](int op) { return (op / per_round) % chunks * gpus + g; };
    const auto backward_stage = [&](int op) {
      return (chunks - 1 - ((op - warmup) / per_round) % chunks) * gpus + g;
    };
    RankOps ops(order.per_gpu[g]);
    for (int op = 0; op < total + warmup; ++op) {
      if (op < total) ops.add(OpKind::F, forward_stage(op));
      if (op >= warmup) ops.add(OpKind::B, backward_stage(op));
    }
  }
  return order;
}

std::optional<StepOrder> zb_v_order(const std::vector<Stage>& stages, int gpus, int micro_batches) {
  if (gpus < 1 || micro_batches < 1 || static_cast<int>(stages.size()) != 2 * gpus)
    return std::nullopt;
  for (int s = 0; s < 2 * gpus; ++s)
    if (stages[s].gpu != (s < gpus ? s : 2 * gpus - 1 - s)) return std::nullopt;
  // The generator fills the pipeline with at least 2P - 1 micro-batches and then drops those
  // beyond the step's.
  const int filled = std::max(2 * gpus - 1, micro_batches);
  StepOrder order;
  order.micro_batches = micro_batches;
  order.per_gpu.resize(gpus);
  for (int g = 0; g < gpus; ++g) {
    const int down = g, up = 2 * gpus - 1 - g;  // the V's two chunks on this GPU
    std::vector<StepAction> all;
    RankOps ops(all);
    int f_down = 0, f_up = 0, b_down = 0, b_up = 0;
    const auto forward = [&](int stage, int& count) {
      ops.add(OpKind::F, stage);
      ++count;
    };
    const auto backward = [&](int stage, int& count, bool weight) {
      ops.add(OpKind::B, stage);
      if (weight) ops.add(OpKind::W, stage);
      ++count;
    };
    for (int i = 0; i < 2 * (gpus - g) - 1; ++i) forward(down, f_down);
    for (int i = 0; i < g; ++i) {
      forward(up, f_up);
      forward(down, f_down);
    }
    for (int i = 0; i < gpus - g; ++i) {
      forward(up, f_up);
      backward(up, b_up, true);
    }
    while (f_up < f_down || f_down < filled) {
      if (f_down < filled) forward(down, f_down);
      backward(down, b_down, true);
      forward(up, f_up);
      backward(up, b_up, true);
    }
    // The drain: B ops first, their W ops after.
    const int w_down_from = b_down, w_up_from = b_up;
    for (int i = 0; i < g; ++i) {
      backward(down, b_down, false);
      backward(up, b_up, false);
    }
    for (int i = 0; i < gpus - g; ++i) {
      backward(down, b_down, false);
      ops.add(OpKind::W, down);
    }
    for (int i = w_up_from; i < b_up; ++i) ops.add(OpKind::W, up);
    for (int i = w_down_from + (gpus - g); i < b_down; ++i) ops.add(OpKind::W, down);
    for (const StepAction& action : all) {
      if (action.micro_batch >= micro_batches) continue;
      if (action.kind == OpKind::W && !stages[action.stage].splits_backward()) continue;
      order.per_gpu[g].push_back(action);
    }
  }
  return order;
}

}  // namespace madpipe::schedule
