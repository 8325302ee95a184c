#include "remat/remat_sequence.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <sstream>

namespace {
using madpipe::remat::RematChain;
using madpipe::remat::RematOp;
using madpipe::remat::RematOpKind;

struct Token {
  RematOpKind kind;
  const char* prefix;
  const char* suffix;
};
constexpr Token kTokens[] = {
    {RematOpKind::ForwardAll, "F", "all"},   {RematOpKind::ForwardCheckpoint, "F", "ck"},
    {RematOpKind::ForwardNone, "F", "none"}, {RematOpKind::Backward, "B", ""},
    {RematOpKind::Offload, "O", ""},         {RematOpKind::Prefetch, "P", ""},
};

std::string token_of(const RematOp& op, const RematChain& chain) {
  const bool loss = op.stage == chain.length();
  if (loss && op.kind == RematOpKind::ForwardAll) return "Loss";
  if (loss && op.kind == RematOpKind::Backward) return "dLoss";
  for (const Token& token : kTokens)
    if (token.kind == op.kind)
      return token.prefix + std::to_string(chain.first_layer + op.stage - 1) + token.suffix;
  MADPIPE_UNREACHABLE("remat op kind");
}

RematOp parse_token(const std::string& text, const RematChain& chain) {
  const int loss = chain.length();
  if (text == "Loss") return {RematOpKind::ForwardAll, loss};
  if (text == "dLoss") return {RematOpKind::Backward, loss};
  for (const Token& token : kTokens) {
    const std::string prefix = token.prefix, suffix = token.suffix;
    if (text.size() <= prefix.size() + suffix.size() ||
        text.compare(0, prefix.size(), prefix) != 0 ||
        text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string digits =
        text.substr(prefix.size(), text.size() - prefix.size() - suffix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    // More than 9 digits name no layer of any chain (and would overflow an int).
    const int stage = digits.size() > 9 ? -1 : std::stoi(digits) - chain.first_layer + 1;
    if (stage < 1 || stage >= loss)
      throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "sequence",
                           "op '" + text + "' names layer " + digits +
                               ", outside the stage's layers " + std::to_string(chain.first_layer) +
                               ".." + std::to_string(chain.first_layer + loss - 2));
    return {token.kind, stage};
  }
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "sequence",
                       "unknown op '" + text +
                           "' (expected F<layer>all, F<layer>ck, F<layer>none, B<layer>, O<layer>, "
                           "P<layer>, Loss or dLoss)");
}
}  // namespace

std::string madpipe::remat::to_string(const RematSequence& sequence, const RematChain& chain) {
  std::string text;
  for (const RematOp& op : sequence) {
    if (!text.empty()) text += ' ';
    text += token_of(op, chain);
  }
  return text;
}

madpipe::remat::RematSequence madpipe::remat::parse_remat_sequence(const std::string& text,
                                                                   const RematChain& chain) {
  RematSequence sequence;
  std::istringstream in(text);
  std::string token;
  while (in >> token) sequence.push_back(parse_token(token, chain));
  return sequence;
}

madpipe::remat::RematSequence madpipe::remat::store_all_sequence(const RematChain& chain) {
  RematSequence sequence;
  const int n = chain.length();
  for (int k = 1; k <= n; ++k) sequence.push_back({RematOpKind::ForwardAll, k});
  for (int k = n; k >= 1; --k) sequence.push_back({RematOpKind::Backward, k});
  return sequence;
}

namespace {
// What is stored on the GPU during a replay.
class ReplayMemory {
 public:
  explicit ReplayMemory(const RematChain& chain)
      : chain_(chain),
        plain_(chain.a.size(), false),
        recorded_(chain.a.size(), false),
        gradient_(chain.a.size(), false) {
    plain_[0] = true;
    gradient_[chain.length()] = true;
    bytes_ = chain.a[0] + chain.delta[chain.length()];
  }

  bool has_input(int k) const { return plain_[k - 1] || recorded_[k - 1]; }
  bool has_plain(int k) const { return plain_[k]; }
  bool has_recorded(int k) const { return recorded_[k]; }
  bool has_gradient(int k) const { return gradient_[k]; }
  std::int64_t bytes() const { return bytes_; }

  void set_plain(int k, bool on) { toggle(plain_, k, on, chain_.a[k]); }
  void set_recorded(int k, bool on) { toggle(recorded_, k, on, chain_.abar[k]); }
  void set_gradient(int k, bool on) { toggle(gradient_, k, on, chain_.delta[k]); }

  // Only delta_0 left.
  bool finished() const {
    for (std::size_t k = 0; k < plain_.size(); ++k)
      if (plain_[k] || recorded_[k] || (gradient_[k] && k != 0)) return false;
    return gradient_[0];
  }

 private:
  void toggle(std::vector<bool>& set, int k, bool on, std::int64_t size) {
    if (set[k] == on) return;
    set[k] = on;
    bytes_ += on ? size : -size;
  }

  const RematChain& chain_;
  std::vector<bool> plain_, recorded_, gradient_;
  std::int64_t bytes_ = 0;
};
}  // namespace

madpipe::remat::SequenceReplay madpipe::remat::replay_sequence(const RematChain& chain,
                                                               const RematSequence& sequence) {
  SequenceReplay replay;
  ReplayMemory memory(chain);
  const int n = chain.length();
  replay.peak_bytes = memory.bytes();
  bool backward_phase = false;
  auto fail = [&](std::size_t index, const std::string& problem) {
    replay.valid = false;
    replay.problem = "op " + std::to_string(index + 1) + " (" + token_of(sequence[index], chain) +
                     "): " + problem;
    return replay;
  };
  for (std::size_t i = 0; i < sequence.size(); ++i) {
    const RematOp& op = sequence[i];
    const int k = op.stage;
    if (k < 1 || k > n) return fail(i, "stage out of range");
    double duration = 0;
    switch (op.kind) {
      case RematOpKind::ForwardAll:
      case RematOpKind::ForwardCheckpoint:
      case RematOpKind::ForwardNone: {
        if (op.kind == RematOpKind::ForwardNone ? !memory.has_plain(k - 1) : !memory.has_input(k))
          return fail(i, "its input is not stored");
        const bool all = op.kind == RematOpKind::ForwardAll;
        const std::int64_t output = all ? chain.abar[k] : chain.a[k];
        replay.peak_bytes =
            std::max(replay.peak_bytes, memory.bytes() + output + chain.forward_overhead[k]);
        if (all) {
          memory.set_plain(k, false);
          memory.set_recorded(k, true);
        } else {
          memory.set_plain(k, true);
        }
        if (op.kind == RematOpKind::ForwardNone) memory.set_plain(k - 1, false);
        duration = chain.forward_ms[k];
        break;
      }
      case RematOpKind::Backward: {
        if (!memory.has_gradient(k)) return fail(i, "the gradient it needs is not stored");
        if (!memory.has_recorded(k)) return fail(i, "its forward was not recorded (no F all)");
        if (!memory.has_input(k)) return fail(i, "its input is not stored");
        replay.peak_bytes = std::max(
            replay.peak_bytes, memory.bytes() + chain.delta[k - 1] + chain.backward_overhead[k]);
        memory.set_gradient(k, false);
        memory.set_recorded(k, false);
        memory.set_plain(k - 1, false);
        memory.set_gradient(k - 1, true);
        duration = chain.backward_ms[k];
        break;
      }
      case RematOpKind::Offload:
      case RematOpKind::Prefetch:
        return fail(i, "offloading needs a host bandwidth; replay it with replay_offload_sequence");
    }
    if (backward_phase) {
      replay.backward_ms += duration;
    } else {
      replay.forward_ms += duration;
    }
    if (op.kind == RematOpKind::ForwardAll && k == n) {
      backward_phase = true;
      replay.stored_bytes = memory.bytes();
    }
  }
  if (!memory.finished()) {
    replay.problem = "the sequence does not end with only the input gradient stored";
    return replay;
  }
  replay.valid = true;
  return replay;
}
