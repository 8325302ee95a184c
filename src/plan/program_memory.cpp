// Send completion points and the memory a lowered program holds, instruction by instruction.

#include "plan/program_memory.hpp"

#include "schedule/memory.hpp"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace madpipe::plan {
namespace {

// (peer, sequence) -> index of the wait for that message, for one GPU's list.
std::map<std::pair<int, int>, int> waits_of(const std::vector<Instr>& list) {
  std::map<std::pair<int, int>, int> out;
  for (int k = 0; k < static_cast<int>(list.size()); ++k)
    if (is_wait(list[k].kind)) out[{list[k].peer, list[k].sequence}] = k;
  return out;
}

// Bytes alive over instructions [first, last] of one list, added up per instruction.
class Occupancy {
 public:
  explicit Occupancy(int n) : delta_(static_cast<std::size_t>(n) + 1, 0), n_(n) {}
  void hold(std::int64_t bytes, int first, int last) {
    if (n_ == 0 || bytes <= 0) return;
    first = std::clamp(first, 0, n_ - 1);
    last = std::clamp(last, first, n_ - 1);
    delta_[first] += bytes;
    delta_[last + 1] -= bytes;
  }
  std::vector<std::int64_t> levels() const {
    std::vector<std::int64_t> out(n_, 0);
    std::int64_t level = 0;
    for (int k = 0; k < n_; ++k) out[k] = level += delta_[k];
    return out;
  }

 private:
  std::vector<std::int64_t> delta_;
  int n_;
};

// Where each send is complete without waiting: after the sender receives a message its peer sent
// once it had received this one.
std::vector<std::vector<int>> completions_without_waiting(const Program& program) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  std::vector<std::map<std::pair<int, int>, int>> waits;
  for (const auto& list : program.per_gpu) waits.push_back(waits_of(list));
  std::vector<std::vector<int>> out(gpus);
  for (int g = 0; g < gpus; ++g) {
    const std::vector<Instr>& list = program.per_gpu[g];
    const int n = static_cast<int>(list.size());
    out[g].assign(n, -1);
    for (int x = 0; x < n; ++x) {
      const Instr& send = list[x];
      if (!is_send(send.kind)) continue;
      out[g][x] = n;
      const int peer = send.peer;
      if (peer < 0 || peer >= gpus || peer == g) continue;
      const auto received = waits[peer].find({g, send.sequence});
      if (received == waits[peer].end()) continue;
      // The peer's first message back after its receipt, and where this GPU waits for it.
      const std::vector<Instr>& theirs = program.per_gpu[peer];
      for (int k = received->second + 1; k < static_cast<int>(theirs.size()); ++k) {
        if (!is_send(theirs[k].kind) || theirs[k].peer != g) continue;
        const auto back = waits[g].find({peer, theirs[k].sequence});
        if (back != waits[g].end() && back->second > x) out[g][x] = back->second;
        break;
      }
    }
  }
  return out;
}

// The index of the next instruction after the send at x that makes a message of the same kind on
// the same cut (the next forward of the stage for an activation, the next backward of the stage
// above for a gradient); -1 when there is none.
int next_message_maker(const std::vector<Instr>& list, int x) {
  const Instr& send = list[x];
  const bool gradient = send.kind == InstrKind::SendGrad;
  const InstrKind maker = gradient ? InstrKind::Backward : InstrKind::Forward;
  const int stage = gradient ? send.stage + 1 : send.stage;
  for (int k = x + 1; k < static_cast<int>(list.size()); ++k)
    if (list[k].kind == maker && list[k].stage == stage) return k;
  return -1;
}

}  // namespace

std::vector<std::vector<int>> send_completions(const Program& program) {
  std::vector<std::vector<int>> settled = completions_without_waiting(program);
  std::vector<std::vector<int>> tight = settled;
  bool earlier = false;
  for (const std::vector<Instr>& list : program.per_gpu)
    for (const Instr& instr : list)
      if (is_send(instr.kind) && instr.sequence < 0) return settled;  // messages not numbered
  for (std::size_t g = 0; g < program.per_gpu.size(); ++g) {
    const std::vector<Instr>& list = program.per_gpu[g];
    for (int x = 0; x < static_cast<int>(list.size()); ++x) {
      if (!is_send(list[x].kind)) continue;
      const int next = next_message_maker(list, x);
      if (next >= 0 && next - 1 < tight[g][x]) {
        tight[g][x] = next - 1;
        earlier = true;
      }
    }
  }
  if (!earlier) return settled;
  Program waiting = program;
  waiting.send_completions = tight;
  return dry_run(waiting).empty() ? tight : settled;
}

std::vector<ProgramMemory> program_memory(const Plan& plan, const Program& program,
                                          std::int64_t data_bytes) {
  const int gpus = static_cast<int>(program.per_gpu.size());
  const std::vector<schedule::Stage>& stages = plan.stages;
  const int num_stages = static_cast<int>(stages.size());
  const std::vector<std::vector<int>> completions = send_completions(program);
  std::vector<ProgramMemory> out(gpus);
  for (int g = 0; g < gpus; ++g) {
    const std::vector<Instr>& list = program.per_gpu[g];
    const int n = static_cast<int>(list.size());
    ProgramMemory& memory = out[g];
    std::int64_t largest_weights = 0;
    for (const schedule::Stage& stage : stages)
      if (stage.gpu == g) {
        memory.weights = schedule::saturated_add(
            memory.weights,
            static_cast<std::int64_t>(plan.platform.weight_copies) * stage.weight_bytes);
        largest_weights = std::max(largest_weights, stage.weight_bytes);
      }
    const bool arena =
        g < static_cast<int>(program.arena_bytes.size()) && program.arena_bytes[g] > 0;
    if (arena) memory.receives = program.arena_bytes[g];

    // Where each op of this GPU is, by (kind, stage, micro-batch).
    std::map<std::tuple<InstrKind, int, int>, int> at;
    for (int k = 0; k < n; ++k) at[{list[k].kind, list[k].stage, list[k].micro_batch}] = k;
    auto index_of = [&](InstrKind kind, int s, int i, int otherwise) {
      const auto it = at.find({kind, s, i});
      return it == at.end() ? otherwise : it->second;
    };
    auto completion = [&](int k) { return completions[g][k] >= n ? n - 1 : completions[g][k]; };

    Occupancy held(n);
    std::vector<std::int64_t> transient(n, 0);
    for (int k = 0; k < n; ++k) {
      const Instr& instr = list[k];
      const int s = instr.stage, i = instr.micro_batch;
      if (s < 0 || s >= num_stages) continue;
      switch (instr.kind) {
        case InstrKind::Forward: {
          transient[k] = stages[s].workspace_bytes;
          if (s == 0 || s + 1 == num_stages) transient[k] += data_bytes;
          if (!program.train) break;
          held.hold(stages[s].stored_bytes, k, index_of(InstrKind::Backward, s, i, n - 1));
          if (s + 1 == num_stages) break;
          // The output until it has left: sent, or handed to the next stage's forward, whose
          // stored bytes include it from then on. A stage with an operation sequence keeps it
          // until its backward.
          const int sent = index_of(InstrKind::SendAct, s, i, -1);
          const int handed = index_of(InstrKind::HandAct, s, i, -1);
          int last = sent >= 0     ? completion(sent)
                     : handed >= 0 ? index_of(InstrKind::Forward, s + 1, i, n) - 1
                                   : n - 1;
          if (!stages[s].sequence.empty())
            last = std::max(last, index_of(InstrKind::Backward, s, i, n - 1));
          held.hold(stages[s].output_bytes, k, last);
          break;
        }
        case InstrKind::Backward: {
          transient[k] = stages[s].workspace_bytes;
          if (stages[s].splits_backward())
            held.hold(stages[s].weight_kept_bytes, k,
                      index_of(InstrKind::BackwardWeight, s, i, n - 1));
          if (s == 0) break;
          // The input's gradient until it has left: sent, or used by the previous stage's
          // backward on this GPU.
          const int sent = index_of(InstrKind::SendGrad, s - 1, i, -1);
          const int last =
              sent >= 0 ? completion(sent) : index_of(InstrKind::Backward, s - 1, i, n - 1);
          held.hold(stages[s - 1].output_bytes, k, last);
          break;
        }
        case InstrKind::PostRecvAct:
        case InstrKind::PostRecvGrad: {
          if (arena || instr.buffer < 0) break;
          const ReceiveBuffer& buffer = program.receive_buffers.at(g).at(instr.buffer);
          held.hold(buffer.bytes > 0 ? buffer.bytes : stages[s].output_bytes, k,
                    buffer.last_use >= 0 ? buffer.last_use : n - 1);
          break;
        }
        case InstrKind::OptimizerStep:
          transient[k] = 2 * stages[s].weight_bytes;
          break;
        case InstrKind::BackwardWeight:
          transient[k] = stages[s].workspace_bytes;
          break;
        default:
          break;
      }
    }
    const std::vector<std::int64_t> levels = held.levels();
    std::int64_t most = -1;
    for (int k = 0; k < n; ++k)
      if (levels[k] + transient[k] > most) {
        most = levels[k] + transient[k];
        memory.peak_at = k;
        memory.in_flight = levels[k];
        memory.transient = transient[k];
      }
    // The caller's optimizer step between programs, with nothing in flight.
    if (program.update_micro_batches == 0 && program.train && 2 * largest_weights > most) {
      memory.peak_at = -1;
      memory.in_flight = 0;
      memory.transient = 2 * largest_weights;
    }
    memory.peak_bytes =
        schedule::saturated_add(schedule::saturated_add(memory.weights, memory.receives),
                                schedule::saturated_add(memory.transient, memory.in_flight));
  }
  return out;
}

}  // namespace madpipe::plan
