// Lowering a plan's periodic pattern to per-GPU instruction lists (program.hpp).

#include "core/error.hpp"
#include "plan/program.hpp"
#include "plan/program_memory.hpp"
#include "plan/receive_plan.hpp"
#include "plan/simulate.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace madpipe::plan {
namespace {

// A compute op of the unrolled pattern with its planned time.
struct Planned {
  double time = 0;
  int chain_position = 0;
  schedule::OpKind kind = schedule::OpKind::F;
  int stage = 0;
  int micro_batch = 0;
};

int residue(int shift, int k) { return ((shift % k) + k) % k; }

void check_options(const LowerOptions& options, int num_stages) {
  auto bad = [](const char* field, const std::string& problem) {
    throw Error(ErrorKind::InvalidInput, "", field, problem);
  };
  if (options.micro_batches < 1)
    bad("micro-batches", "must be >= 1, got " + std::to_string(options.micro_batches));
  if (options.lookahead < 0)
    bad("receive-lookahead", "must be >= 0, got " + std::to_string(options.lookahead));
  if (options.update_micro_batches < 0)
    bad("update micro-batches",
        "must be >= 0, got " + std::to_string(options.update_micro_batches));
  if (!options.message_bytes.empty() &&
      static_cast<int>(options.message_bytes.size()) != num_stages)
    bad("message bytes", "one size per stage: " + std::to_string(options.message_bytes.size()) +
                             " for " + std::to_string(num_stages) + " stages");
}

// Every planned F (and B in training) of micro-batches 0..N-1, grouped by GPU, in the order of
// their planned times.
std::vector<std::vector<Planned>> in_pattern_order(const Plan& plan, const LowerOptions& options) {
  const schedule::Pattern& pattern = plan.pattern;
  const int k = pattern.k;
  const std::vector<schedule::Op> chain = micro_batch_chain(plan.stages, plan.platform);
  std::map<std::pair<int, int>, int> position;  // (kind, stage) -> chain position
  for (std::size_t c = 0; c < chain.size(); ++c)
    position[{static_cast<int>(chain[c].kind), chain[c].stage}] = static_cast<int>(c);
  for (const schedule::Op& w : schedule::weight_ops(plan.stages))  // after the chain
    position[{static_cast<int>(w.kind), w.stage}] = static_cast<int>(chain.size()) + w.stage;
  std::vector<std::vector<Planned>> planned(plan.platform.gpus);
  for (const schedule::Op& op : pattern.ops) {
    if (is_transfer(op.kind) || (op.kind != schedule::OpKind::F && !options.train)) continue;
    for (int i = residue(op.shift, k); i < options.micro_batches; i += k) {
      const int period = (i - op.shift) / k;
      planned[op.gpu].push_back({period * pattern.period_ms + op.start_ms,
                                 position[{static_cast<int>(op.kind), op.stage}], op.kind, op.stage,
                                 i});
    }
  }
  for (auto& ops : planned)
    std::sort(ops.begin(), ops.end(), [](const Planned& a, const Planned& b) {
      return std::tie(a.time, a.micro_batch, a.chain_position) <
             std::tie(b.time, b.micro_batch, b.chain_position);
    });
  return planned;
}

// The compute ops of each GPU in the order it runs them. A synchronous training step of N
// micro-batches is the simulated ASAP step (F and B in pattern order, W ops of split stages in
// the warm-up's and drain's bubbles, within the plan's predicted memory); with updates inside
// the program (2BW) or forwards only, the pattern's order.
std::vector<std::vector<Planned>> planned_ops(const Plan& plan, const LowerOptions& options) {
  if (!options.train || options.update_micro_batches > 0) return in_pattern_order(plan, options);
  SimOptions step;
  step.micro_batches = options.micro_batches;
  step.policy = StartPolicy::Asap;
  const SimResult simulated = simulate(plan, step);
  std::vector<std::vector<Planned>> planned(plan.platform.gpus);
  for (int g = 0; g < plan.platform.gpus; ++g)
    for (const SimOp& op : simulated.per_gpu[g])
      planned[g].push_back({op.start_ms, 0, op.kind, op.stage, op.micro_batch});
  return planned;
}

// One GPU's compute ops, hand-overs, sends, receive waits and optimizer steps (no posts yet);
// assigns activation slots, growing program.slots.
std::vector<Instr> compute_list(const Plan& plan, const LowerOptions& options, int g,
                                const std::vector<Planned>& ops, Program& program) {
  const int num_stages = static_cast<int>(plan.stages.size());
  const int m = options.update_micro_batches;
  std::vector<std::set<int>> free_slots(num_stages);
  std::map<std::pair<int, int>, int> slot_of;    // (stage, micro-batch) -> slot
  std::map<std::pair<int, int>, int> backwards;  // (stage, update) -> backwards done
  auto take_slot = [&](int s) {
    if (free_slots[s].empty()) return program.slots[s]++;
    const int slot = *free_slots[s].begin();
    free_slots[s].erase(free_slots[s].begin());
    return slot;
  };
  std::vector<Instr> out;
  auto add = [&](InstrKind kind, int stage, int micro_batch, int peer = -1, int slot = -1) {
    Instr instr;
    instr.kind = kind;
    instr.stage = stage;
    instr.micro_batch = micro_batch;
    instr.peer = peer;
    instr.slot = slot;
    out.push_back(instr);
  };
  for (const Planned& p : ops) {
    const int s = p.stage, i = p.micro_batch;
    const bool last = s == num_stages - 1;
    const int prev_gpu = s > 0 ? plan.stages[s - 1].gpu : g;
    const int next_gpu = !last ? plan.stages[s + 1].gpu : g;
    if (p.kind == schedule::OpKind::F) {
      if (prev_gpu != g) add(InstrKind::RecvAct, s - 1, i, prev_gpu);
      const int slot = take_slot(s);
      add(InstrKind::Forward, s, i, -1, slot);
      if (!last) {
        if (next_gpu == g)
          add(InstrKind::HandAct, s, i, -1, slot);
        else
          add(InstrKind::SendAct, s, i, next_gpu, slot);
      }
      if (options.train)
        slot_of[{s, i}] = slot;
      else
        free_slots[s].insert(slot);  // validation keeps nothing for a backward
      continue;
    }
    const bool split = plan.stages[s].splits_backward();
    if (p.kind == schedule::OpKind::W) {
      add(InstrKind::BackwardWeight, s, i);
      if (m > 0 && ++backwards[{s, i / m}] == m) add(InstrKind::OptimizerStep, s, i / m);
      continue;
    }
    if (!last && next_gpu != g) add(InstrKind::RecvGrad, s, i, next_gpu);
    const int slot = slot_of.at({s, i});
    add(InstrKind::Backward, s, i, -1, slot);
    free_slots[s].insert(slot);
    if (s > 0) {
      if (prev_gpu == g)
        add(InstrKind::HandGrad, s - 1, i);
      else
        add(InstrKind::SendGrad, s - 1, i, prev_gpu);
    }
    // A split stage's weight gradients are complete after its W ops.
    if (!split && m > 0 && ++backwards[{s, i / m}] == m) add(InstrKind::OptimizerStep, s, i / m);
  }
  return out;
}

// Numbers the messages of every GPU pair in sending order; a receive gets its send's number.
void number_messages(std::vector<std::vector<Instr>>& lists) {
  using Key = std::tuple<bool, int, int, int, int>;  // (gradient, stage, micro-batch, from, to)
  std::map<Key, int> sequence_of;
  std::map<std::pair<int, int>, int> sent;  // (from, to) -> messages so far
  for (int g = 0; g < static_cast<int>(lists.size()); ++g)
    for (Instr& instr : lists[g])
      if (is_send(instr.kind)) {
        instr.sequence = sent[{g, instr.peer}]++;
        sequence_of[{carries_gradient(instr.kind), instr.stage, instr.micro_batch, g, instr.peer}] =
            instr.sequence;
      }
  for (int g = 0; g < static_cast<int>(lists.size()); ++g)
    for (Instr& instr : lists[g])
      if (is_wait(instr.kind)) {
        auto it = sequence_of.find(
            {carries_gradient(instr.kind), instr.stage, instr.micro_batch, instr.peer, g});
        if (it == sequence_of.end())
          throw Error(
              ErrorKind::Internal, "", "program",
              "gpu " + std::to_string(g) + " receives " + to_string(instr) + " that nobody sends");
        instr.sequence = it->second;
      }
}

// Inserts the posts of the GPU's receives where the receive plan puts them and records the
// buffers.
void post_receives(const LowerOptions& options, int g, std::vector<Instr> list, Program& program) {
  const bool placed = options.posting == ReceivePosting::Arena && !options.message_bytes.empty();
  const std::vector<std::int64_t> bytes = options.message_bytes.empty()
                                              ? std::vector<std::int64_t>(program.slots.size(), 0)
                                              : options.message_bytes;
  const int lookahead = options.posting == ReceivePosting::Upfront ? std::numeric_limits<int>::max()
                                                                   : options.lookahead;
  const ReceivePlan receives =
      plan_receives(list, bytes, options.train, lookahead, placed ? options.max_placed : 0);
  const int n = static_cast<int>(list.size());
  std::vector<std::vector<int>> posts_before(n + 1);
  for (int j = 0; j < static_cast<int>(receives.slots.size()); ++j) {
    posts_before[receives.slots[j].post_before].push_back(j);
    list[receives.slots[j].instr].buffer = j;
  }
  std::vector<ReceiveBuffer>& buffers = program.receive_buffers[g];
  buffers.assign(receives.slots.size(), ReceiveBuffer{});
  std::vector<int> new_index(n);
  std::vector<Instr>& out = program.per_gpu[g];
  for (int k = 0; k < n; ++k) {
    std::vector<int>& posts = posts_before[k];
    std::sort(posts.begin(), posts.end(), [&](int a, int b) {
      return list[receives.slots[a].instr].sequence < list[receives.slots[b].instr].sequence;
    });
    for (int j : posts) {
      Instr post = list[receives.slots[j].instr];
      post.kind =
          post.kind == InstrKind::RecvAct ? InstrKind::PostRecvAct : InstrKind::PostRecvGrad;
      buffers[j].post = static_cast<int>(out.size());
      out.push_back(post);
    }
    new_index[k] = static_cast<int>(out.size());
    out.push_back(list[k]);
  }
  for (int j = 0; j < static_cast<int>(receives.slots.size()); ++j) {
    buffers[j].offset = receives.slots[j].offset;
    buffers[j].bytes = receives.slots[j].bytes;
    buffers[j].last_use = new_index[receives.slots[j].last_use];
  }
  program.arena_bytes[g] =
      receives.slots.empty() || !receives.placed() ? 0 : receives.arena_bytes();
}

}  // namespace

Program lower(const Plan& plan, const LowerOptions& options) {
  const int num_stages = static_cast<int>(plan.stages.size());
  check_options(options, num_stages);
  const int gpus = plan.platform.gpus;
  Program program;
  program.micro_batches = options.micro_batches;
  program.train = options.train;
  program.update_micro_batches = options.train ? options.update_micro_batches : 0;
  program.slots.assign(num_stages, 0);
  program.per_gpu.resize(gpus);
  program.receive_buffers.resize(gpus);
  program.arena_bytes.assign(gpus, 0);
  const std::vector<std::vector<Planned>> planned = planned_ops(plan, options);
  std::vector<std::vector<Instr>> lists(gpus);
  for (int g = 0; g < gpus; ++g) lists[g] = compute_list(plan, options, g, planned[g], program);
  number_messages(lists);
  for (int g = 0; g < gpus; ++g) post_receives(options, g, std::move(lists[g]), program);
  program.send_completions = send_completions(program);
  return program;
}

Program lower(const Plan& plan, int micro_batches) {
  LowerOptions options;
  options.micro_batches = micro_batches;
  return lower(plan, options);
}

}  // namespace madpipe::plan
