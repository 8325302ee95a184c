#include "plan/simulate.hpp"

#include "core/error.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace {
// One execution of a pattern op for one micro-batch.
struct Instance {
  int position = 0;  // index in the micro-batch chain
  int micro_batch = 0;
  int op = 0;  // index in pattern.ops
  int resource = 0;
  double planned = 0;  // j * period + start_ms
  double duration = 0;
  int resource_prev = -1;
  int resource_next = -1;
  int waiting = 0;  // unfinished predecessors (chain and resource)
  bool done = false;
  double start = 0;
  double end = 0;
};

struct MemoryEvent {
  double order = 0;  // ends are moved a tolerance earlier so that ends at a start go first
  double time = 0;
  bool is_start = false;
  std::int64_t delta = 0;
};
}  // namespace

[[noreturn]] static void fail(const std::string& field, const std::string& problem) {
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", field, problem);
}

static std::string resource_name(int resource, int gpus) {
  if (resource < gpus) return "gpu " + std::to_string(resource);
  const int link = resource - gpus;
  return "link [" + std::to_string(link / gpus) + ", " + std::to_string(link % gpus) + "]";
}

// Long enough that the measuring window (from N/4 on) starts after the warm-up: more than the
// largest number of micro-batches in flight on any stage.
static int default_micro_batches(int num_stages, int max_in_flight, int k) {
  int n = 4 * std::max(num_stages, max_in_flight);
  n = (n + k - 1) / k * k;
  return std::max(n, 2 * k);
}

// For each chain position and residue mod k, the index of the pattern op that runs it.
static std::vector<std::vector<int>> op_table(const madpipe::plan::Plan& plan,
                                              const std::vector<madpipe::schedule::Op>& chain) {
  const auto& pattern = plan.pattern;
  const int k = pattern.k;
  const int gpus = plan.platform.gpus;
  if (static_cast<std::size_t>(k) > pattern.ops.size())
    fail("/pattern/k", "k = " + std::to_string(k) + " exceeds the number of ops (" +
                           std::to_string(pattern.ops.size()) +
                           "); each stage needs k F ops and k B ops");
  std::map<std::tuple<int, int, int>, int> by_key;  // stage, kind, residue -> op
  for (std::size_t i = 0; i < pattern.ops.size(); ++i) {
    const madpipe::schedule::Op& op = pattern.ops[i];
    const std::string p = "/pattern/ops/" + std::to_string(i);
    if (!std::isfinite(op.start_ms) || !std::isfinite(op.duration_ms) || op.duration_ms < 0)
      fail(p, "start_ms and duration_ms must be finite, duration_ms >= 0");
    if (madpipe::schedule::is_transfer(op.kind)) {
      if (op.link.a < 0 || op.link.a >= op.link.b || op.link.b >= gpus)
        fail(p + "/link", "must be [a, b] with 0 <= a < b < " + std::to_string(gpus));
    } else if (op.gpu < 0 || op.gpu >= gpus) {
      fail(p + "/gpu",
           "must be in [0, " + std::to_string(gpus) + "), got " + std::to_string(op.gpu));
    }
    const int residue = ((op.shift % k) + k) % k;
    const auto [it, inserted] = by_key.emplace(
        std::make_tuple(op.stage, static_cast<int>(op.kind), residue), static_cast<int>(i));
    if (!inserted)
      fail(p + "/shift", madpipe::schedule::op_token(op.kind, op.stage) +
                             " runs micro-batches i with i mod " + std::to_string(k) + " = " +
                             std::to_string(residue) + " twice (also op " +
                             std::to_string(it->second) + ")");
  }
  std::vector<std::vector<int>> table(chain.size(), std::vector<int>(k, -1));
  for (std::size_t c = 0; c < chain.size(); ++c) {
    for (int r = 0; r < k; ++r) {
      const auto it = by_key.find({chain[c].stage, static_cast<int>(chain[c].kind), r});
      if (it == by_key.end())
        fail("/pattern", "no " + madpipe::schedule::op_token(chain[c].kind, chain[c].stage) +
                             " op runs micro-batches i with i mod " + std::to_string(k) + " = " +
                             std::to_string(r));
      table[c][r] = it->second;
    }
  }
  return table;
}

[[noreturn]] static void report_deadlock(const std::vector<Instance>& instances,
                                         const std::map<int, std::vector<int>>& by_resource,
                                         const std::vector<madpipe::schedule::Op>& ops,
                                         const std::vector<int>& before, int gpus) {
  std::string stuck;
  int listed = 0, more = 0;
  for (const auto& [r, list] : by_resource) {
    for (int id : list) {
      if (instances[id].done) continue;
      if (listed == 8) {
        ++more;
        break;
      }
      const Instance& head = instances[id];
      const auto& op = ops[head.op];
      std::string part = resource_name(r, gpus) + " waits to run " +
                         madpipe::schedule::op_token(op.kind, op.stage, head.micro_batch);
      if (before[head.position] >= 0) {
        const auto& needed = ops[instances[id - head.position + before[head.position]].op];
        part += ", which needs " +
                madpipe::schedule::op_token(needed.kind, needed.stage, head.micro_batch);
      }
      stuck += (listed == 0 ? "" : "; ") + part;
      ++listed;
      break;
    }
  }
  if (more > 0) stuck += "; and " + std::to_string(more) + " more";
  fail("/pattern", "pattern deadlocks: " + stuck);
}

static void check_simulated(const madpipe::plan::Plan& plan,
                            const madpipe::plan::SimOptions& options) {
  const madpipe::schedule::Pattern& pattern = plan.pattern;
  const int gpus = plan.platform.gpus;
  const int num_stages = static_cast<int>(plan.stages.size());
  if (gpus < 1) fail("/platform/gpus", "must be >= 1, got " + std::to_string(gpus));
  if (num_stages == 0) fail("/stages", "must list at least one stage");
  for (int s = 0; s < num_stages; ++s)
    if (plan.stages[s].gpu < 0 || plan.stages[s].gpu >= gpus)
      fail("/stages/" + std::to_string(s) + "/gpu", "must be in [0, " + std::to_string(gpus) +
                                                        "), got " +
                                                        std::to_string(plan.stages[s].gpu));
  if (pattern.k < 1) fail("/pattern/k", "must be >= 1, got " + std::to_string(pattern.k));
  if (!(std::isfinite(pattern.period_ms) && pattern.period_ms > 0))
    fail("/pattern/period_ms", "must be a finite number > 0");
  if (options.micro_batches < 0)
    fail("micro_batches", "must be >= 0, got " + std::to_string(options.micro_batches));
}

namespace {
// The ops of one micro-batch: its chain, each op after the one before it, then the W ops of
// split stages, each after B of its stage.
struct MicroBatchOps {
  std::vector<madpipe::schedule::Op> ops;
  std::vector<int> before;              // per op: the op it follows (-1: none)
  std::vector<std::vector<int>> after;  // per op: the ops that follow it
};

// The pattern's ops for N micro-batches: instance id = micro_batch * length + position.
struct Unrolled {
  int micro_batches = 0;
  int length = 0;
  std::vector<Instance> instances;
  double origin = 0;  // the earliest planned time
  // Each resource's instances in the order of their planned times; only the resources the
  // pattern uses (there are gpus + gpus * gpus in all).
  std::map<int, std::vector<int>> by_resource;
  std::vector<std::vector<int>> executed;  // per GPU: its instances in the order they ran
};
}  // namespace

static MicroBatchOps micro_batch_ops(const madpipe::plan::Plan& plan) {
  MicroBatchOps m;
  m.ops = micro_batch_chain(plan.stages, plan.platform);
  m.before.resize(m.ops.size());
  for (std::size_t c = 0; c < m.ops.size(); ++c) m.before[c] = static_cast<int>(c) - 1;
  const std::size_t chain_length = m.ops.size();
  for (const madpipe::schedule::Op& w : weight_ops(plan.stages)) {
    for (std::size_t c = 0; c < chain_length; ++c)
      if (m.ops[c].kind == madpipe::schedule::OpKind::B && m.ops[c].stage == w.stage)
        m.before.push_back(static_cast<int>(c));
    m.ops.push_back(w);
  }
  m.after.resize(m.ops.size());
  for (std::size_t c = 0; c < m.ops.size(); ++c)
    if (m.before[c] >= 0) m.after[m.before[c]].push_back(static_cast<int>(c));
  return m;
}

static Unrolled unroll(const madpipe::plan::Plan& plan, const MicroBatchOps& m,
                       const std::vector<std::vector<int>>& table, int n) {
  const madpipe::schedule::Pattern& pattern = plan.pattern;
  const int k = pattern.k;
  Unrolled u;
  u.micro_batches = n;
  u.length = static_cast<int>(m.ops.size());
  u.instances.resize(static_cast<std::size_t>(n) * u.length);
  u.origin = std::numeric_limits<double>::infinity();
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < u.length; ++c) {
      Instance& x = u.instances[static_cast<std::size_t>(i) * u.length + c];
      const int op_index = table[c][i % k];
      const madpipe::schedule::Op& op = pattern.ops[op_index];
      const long long j = (static_cast<long long>(i) - op.shift) / k;  // exact: same residue
      x.position = c;
      x.micro_batch = i;
      x.op = op_index;
      x.resource = resource_of(op, plan.platform.gpus);
      x.planned = static_cast<double>(j) * pattern.period_ms + op.start_ms;
      x.duration = op.duration_ms;
      u.origin = std::min(u.origin, x.planned);
    }
  }
  for (int id = 0; id < static_cast<int>(u.instances.size()); ++id)
    u.by_resource[u.instances[id].resource].push_back(id);
  for (auto& [resource, list] : u.by_resource) {
    std::sort(list.begin(), list.end(), [&](int a, int b) {
      const Instance& x = u.instances[a];
      const Instance& y = u.instances[b];
      return std::tie(x.planned, x.position, x.micro_batch) <
             std::tie(y.planned, y.position, y.micro_batch);
    });
    for (std::size_t q = 0; q + 1 < list.size(); ++q) {
      u.instances[list[q]].resource_next = list[q + 1];
      u.instances[list[q + 1]].resource_prev = list[q];
    }
  }
  return u;
}

// The timetable step: an instance runs once its chain predecessor and the previous instance on
// its resource are done, and not before its planned time. Throws when some never can.
static void run_timetable(Unrolled& u, const MicroBatchOps& m, const madpipe::plan::Plan& plan) {
  std::vector<Instance>& instances = u.instances;
  std::vector<int> ready;
  for (int id = 0; id < static_cast<int>(instances.size()); ++id) {
    Instance& x = instances[id];
    x.waiting = (m.before[x.position] >= 0 ? 1 : 0) + (x.resource_prev >= 0 ? 1 : 0);
    if (x.waiting == 0) ready.push_back(id);
  }
  std::size_t finished = 0;
  while (!ready.empty()) {
    const int id = ready.back();
    ready.pop_back();
    Instance& x = instances[id];
    double start = x.planned - u.origin;
    const int first_of_micro_batch = id - x.position;
    if (m.before[x.position] >= 0)
      start = std::max(start, instances[first_of_micro_batch + m.before[x.position]].end);
    if (x.resource_prev >= 0) start = std::max(start, instances[x.resource_prev].end);
    x.start = start;
    x.end = start + x.duration;
    x.done = true;
    ++finished;
    for (int next : m.after[x.position])
      if (--instances[first_of_micro_batch + next].waiting == 0)
        ready.push_back(first_of_micro_batch + next);
    if (x.resource_next >= 0 && --instances[x.resource_next].waiting == 0)
      ready.push_back(x.resource_next);
  }
  if (finished != instances.size())
    report_deadlock(instances, u.by_resource, plan.pattern.ops, m.before, plan.platform.gpus);
}

// What a micro-batch of the stage keeps from the end of its B to the end of its W (0 where the
// backward is whole).
static std::int64_t kept_until_weight(const madpipe::schedule::Stage& stage) {
  return stage.splits_backward() ? stage.weight_kept_bytes : 0;
}

namespace {
// A GPU in the step: its F and B instances in the order of their planned times, and the W
// instances whose B is done, by planned time.
struct GpuQueue {
  std::vector<int> sequence;
  std::size_t next = 0;
  std::set<std::pair<double, int>> pending_weights;
  double free_at = 0;
  std::int64_t memory = 0;  // what its ops hold now (static memory included)
  std::int64_t budget = 0;  // W waits only while the GPU stays within it (run_asap's budget)
};
}  // namespace

// The ASAP step: every transfer and every F and B runs in the order of its planned time on its
// resource, as soon as its input and its resource are free. A W of a split stage waits once its
// B is done and runs where its GPU would otherwise wait (it ends before the next F or B can
// start), before an F or B that would take the GPU's memory above the budget, or at the end: in
// the warm-up and drain it fills the bubbles (the zero-bubble schedules' idea), and the B ops of
// the drain reach the first stages sooner. Each step schedules, of all the resources, the op
// that can start first.
static void run_asap(Unrolled& u, const MicroBatchOps& m, const madpipe::plan::Plan& plan,
                     const std::vector<std::int64_t>& budget) {
  using madpipe::schedule::OpKind;
  std::vector<Instance>& instances = u.instances;
  const int gpus = plan.platform.gpus;
  const std::vector<std::int64_t> peaks =
      totals(evaluate_memory(plan.stages, plan.pattern, plan.platform));
  std::vector<GpuQueue> queues(gpus);
  for (int g = 0; g < gpus; ++g) {
    queues[g].memory = static_memory(plan.stages, g, plan.platform).total();
    queues[g].budget = peaks[g];
    if (g < static_cast<int>(budget.size())) queues[g].budget = std::max(peaks[g], budget[g]);
  }
  std::vector<int> weight_of_stage(plan.stages.size(), -1);  // position of the stage's W
  for (int c = 0; c < u.length; ++c)
    if (m.ops[c].kind == OpKind::W) weight_of_stage[m.ops[c].stage] = c;
  struct LinkQueue {
    const std::vector<int>* sequence = nullptr;
    std::size_t next = 0;
    double free_at = 0;
  };
  std::vector<LinkQueue> links;
  for (const auto& [resource, list] : u.by_resource) {
    if (resource >= gpus) {
      links.push_back({&list, 0, 0.0});
      continue;
    }
    for (int id : list)
      if (m.ops[instances[id].position].kind != OpKind::W) queues[resource].sequence.push_back(id);
  }
  // When instance `id` could start on a resource free at `free_at`; nullopt while its input is
  // not done.
  const auto ready_at = [&](int id, double free_at) -> std::optional<double> {
    const Instance& x = instances[id];
    const int before = m.before[x.position];
    if (before < 0) return free_at;
    const Instance& input = instances[id - x.position + before];
    if (!input.done) return std::nullopt;
    return std::max(free_at, input.end);
  };
  // What starting instance `id` adds to its GPU's memory at its peak (F: what it stores; B: what
  // W keeps beyond the stored bytes it frees).
  const auto growth = [&](int id) -> std::int64_t {
    const madpipe::schedule::Op& op = m.ops[instances[id].position];
    const madpipe::schedule::Stage& stage = plan.stages[op.stage];
    if (op.kind == OpKind::F) return stage.stored_bytes;
    const std::int64_t kept = kept_until_weight(stage);
    return std::max<std::int64_t>(0, kept - stage.stored_bytes);
  };
  const auto run = [&](int id, double start) {
    Instance& x = instances[id];
    x.start = start;
    x.end = start + x.duration;
    x.done = true;
    const madpipe::schedule::Op& op = m.ops[x.position];
    if (x.resource >= gpus) return;
    GpuQueue& q = queues[x.resource];
    q.free_at = x.end;
    const madpipe::schedule::Stage& stage = plan.stages[op.stage];
    const std::int64_t kept = kept_until_weight(stage);
    if (op.kind == OpKind::F) {
      q.memory += stage.stored_bytes;
    } else if (op.kind == OpKind::B) {
      q.memory += kept - stage.stored_bytes;
      if (weight_of_stage[op.stage] >= 0) {
        const int w = id - x.position + weight_of_stage[op.stage];
        q.pending_weights.insert({instances[w].planned, w});
      }
    } else {
      q.memory -= kept;
    }
    if (op.kind == OpKind::W)
      q.pending_weights.erase({x.planned, id});
    else
      ++q.next;
  };
  std::vector<double*> free_at_of(static_cast<std::size_t>(gpus) * (gpus + 1), nullptr);
  for (int g = 0; g < gpus; ++g) free_at_of[g] = &queues[g].free_at;
  for (LinkQueue& link : links)
    free_at_of[instances[link.sequence->front()].resource] = &link.free_at;
  // No earlier than this can instance `id`'s input be done: the ops before it in its chain that
  // are not done run back to back, each once its resource is free.
  const auto earliest_ready = [&](int id) {
    const Instance& x = instances[id];
    const int first = id - x.position;
    std::vector<int> waiting_for;
    int c = m.before[x.position];
    while (c >= 0 && !instances[first + c].done) {
      waiting_for.push_back(first + c);
      c = m.before[c];
    }
    double t = c >= 0 ? instances[first + c].end : 0.0;
    for (auto it = waiting_for.rbegin(); it != waiting_for.rend(); ++it)
      t = std::max(t, *free_at_of[instances[*it].resource]) + instances[*it].duration;
    return t;
  };
  const double eps = 1e-9 * plan.pattern.period_ms;
  const double infinity = std::numeric_limits<double>::infinity();
  std::size_t finished = 0;
  while (finished < instances.size()) {
    double best_start = infinity;
    int best = -1;
    for (LinkQueue& link : links) {
      if (link.next >= link.sequence->size()) continue;
      const int id = (*link.sequence)[link.next];
      if (const auto start = ready_at(id, link.free_at); start && *start < best_start) {
        best_start = *start;
        best = id;
      }
    }
    for (GpuQueue& q : queues) {
      const int weight = q.pending_weights.empty() ? -1 : q.pending_weights.begin()->second;
      int chosen = -1;
      double start = infinity;
      if (q.next < q.sequence.size()) {
        const int id = q.sequence[q.next];
        const bool memory_first = weight >= 0 && q.memory + growth(id) > q.budget;
        const bool fits_before =
            weight >= 0 && q.free_at + instances[weight].duration <= earliest_ready(id) + eps;
        if (memory_first || fits_before) {
          chosen = weight;
          start = q.free_at;
        } else if (const std::optional<double> ready = ready_at(id, q.free_at)) {
          chosen = id;
          start = *ready;
        }
      } else if (weight >= 0) {
        chosen = weight;
        start = q.free_at;
      }
      if (chosen >= 0 && start < best_start) {
        best_start = start;
        best = chosen;
      }
    }
    if (best < 0) break;
    run(best, best_start);
    ++finished;
    const int resource = instances[best].resource;
    if (resource < gpus) {
      u.executed[resource].push_back(best);
    } else {
      for (LinkQueue& link : links)
        if (link.next < link.sequence->size() && (*link.sequence)[link.next] == best) {
          link.next++;
          link.free_at = instances[best].end;
        }
    }
  }
  if (finished != instances.size())
    report_deadlock(instances, u.by_resource, plan.pattern.ops, m.before, plan.platform.gpus);
}

// The step in the plan's step order: each GPU runs its F, B and W ops in that order, each as soon
// as its input and its GPU are free; a free link carries, of the transfers whose input is done,
// the one whose receiving op comes soonest in its GPU's order (the runtime's sends follow its
// compute order, its receives the receiving GPU's), or, where the order lists the links'
// transfers, the next of its list.
static void run_in_order(Unrolled& u, const MicroBatchOps& m, const madpipe::plan::Plan& plan,
                         const madpipe::schedule::StepOrder& order) {
  std::vector<Instance>& instances = u.instances;
  const int gpus = plan.platform.gpus;
  std::map<std::pair<int, int>, int> position;  // (kind, stage) -> position in a micro-batch
  for (int c = 0; c < u.length; ++c)
    position[{static_cast<int>(m.ops[c].kind), m.ops[c].stage}] = c;
  std::vector<std::vector<int>> sequence(gpus);
  for (int g = 0; g < gpus && g < static_cast<int>(order.per_gpu.size()); ++g)
    for (const madpipe::schedule::StepAction& action : order.per_gpu[g]) {
      const auto it = position.find({static_cast<int>(action.kind), action.stage});
      if (it == position.end() || action.micro_batch >= u.micro_batches ||
          madpipe::schedule::is_transfer(action.kind))
        fail("/step_order/gpus/" + std::to_string(g),
             madpipe::schedule::to_string(action) + " is not an op of the step");
      sequence[g].push_back(action.micro_batch * u.length + it->second);
    }
  // The links' orders, where the step order gives them: each link runs its list in turn.
  std::map<int, std::vector<int>> link_sequence;
  for (std::size_t l = 0; l < order.per_link.size(); ++l) {
    const madpipe::schedule::LinkOrder& link = order.per_link[l];
    const int resource = gpus + link.link.a * gpus + link.link.b;
    std::vector<int>& ids = link_sequence[resource];
    for (const madpipe::schedule::StepAction& action : link.transfers) {
      const auto it = position.find({static_cast<int>(action.kind), action.stage});
      const int id = action.micro_batch * u.length + (it == position.end() ? 0 : it->second);
      if (it == position.end() || action.micro_batch >= u.micro_batches ||
          instances[id].resource != resource)
        fail("/step_order/links/" + std::to_string(l),
             madpipe::schedule::to_string(action) + " is not a transfer of the step on this link");
      ids.push_back(id);
    }
  }
  std::map<int, std::size_t> link_next;
  const bool ordered_links = !link_sequence.empty();
  std::vector<int> place(instances.size(), 0);  // a compute op's index in its GPU's order
  for (int g = 0; g < gpus; ++g)
    for (std::size_t i = 0; i < sequence[g].size(); ++i)
      place[sequence[g][i]] = static_cast<int>(i);
  std::vector<std::size_t> next(gpus, 0);
  std::vector<double> free_at(static_cast<std::size_t>(gpus) * (gpus + 1), 0.0);
  std::map<int, std::set<std::pair<double, int>>> ready_transfers;  // link -> (input end, id)
  const auto input_end = [&](int id) -> std::optional<double> {
    const Instance& x = instances[id];
    const int before = m.before[x.position];
    if (before < 0) return 0.0;
    const Instance& input = instances[id - x.position + before];
    if (!input.done) return std::nullopt;
    return input.end;
  };
  const double infinity = std::numeric_limits<double>::infinity();
  std::size_t finished = 0;
  while (finished < instances.size()) {
    double best_start = infinity;
    int best = -1;
    for (const auto& [link, ready] : ready_transfers) {
      if (ready.empty()) continue;
      const double start = std::max(free_at[link], ready.begin()->first);
      if (!(start < best_start)) continue;
      best_start = start;
      long most_urgent = std::numeric_limits<long>::max();
      for (const auto& [input_done, id] : ready) {
        if (input_done > start) break;
        const int receiver = id - instances[id].position + m.after[instances[id].position].front();
        const long wait = place[receiver] - static_cast<long>(next[instances[receiver].resource]);
        if (wait < most_urgent) {
          most_urgent = wait;
          best = id;
        }
      }
    }
    for (const auto& [link, ids] : link_sequence) {
      if (link_next[link] >= ids.size()) continue;
      const int id = ids[link_next[link]];
      if (const std::optional<double> ready = input_end(id))
        if (std::max(free_at[link], *ready) < best_start) {
          best_start = std::max(free_at[link], *ready);
          best = id;
        }
    }
    for (int g = 0; g < gpus; ++g) {
      if (next[g] >= sequence[g].size()) continue;
      const int id = sequence[g][next[g]];
      if (const std::optional<double> ready = input_end(id))
        if (std::max(free_at[g], *ready) < best_start) {
          best_start = std::max(free_at[g], *ready);
          best = id;
        }
    }
    if (best < 0) break;
    Instance& x = instances[best];
    x.start = best_start;
    x.end = best_start + x.duration;
    x.done = true;
    ++finished;
    free_at[x.resource] = x.end;
    if (x.resource < gpus) {
      ++next[x.resource];
      u.executed[x.resource].push_back(best);
    } else if (ordered_links) {
      ++link_next[x.resource];
    } else {
      ready_transfers[x.resource].erase(
          {instances[m.before[x.position] + best - x.position].end, best});
    }
    for (int after : m.after[x.position]) {
      const int id = best - x.position + after;
      if (instances[id].resource >= gpus && !ordered_links)
        ready_transfers[instances[id].resource].insert({x.end, id});
    }
  }
  if (finished == instances.size()) return;
  std::string stuck;
  for (int g = 0; g < gpus; ++g)
    if (next[g] < sequence[g].size()) {
      const Instance& head = instances[sequence[g][next[g]]];
      stuck += std::string(stuck.empty() ? "" : "; ") + "gpu " + std::to_string(g) +
               " waits to run " +
               madpipe::schedule::op_token(m.ops[head.position].kind, m.ops[head.position].stage,
                                           head.micro_batch);
    }
  for (const auto& [link, ids] : link_sequence)
    if (link_next[link] < ids.size()) {
      const Instance& head = instances[ids[link_next[link]]];
      stuck += std::string(stuck.empty() ? "" : "; ") + resource_name(link, gpus) +
               " waits to run " +
               madpipe::schedule::op_token(m.ops[head.position].kind, m.ops[head.position].stage,
                                           head.micro_batch);
    }
  if (stuck.empty()) stuck = "some of the step's ops are in no gpu's or link's order";
  fail("/step_order", "the order deadlocks or is incomplete: " + stuck);
}

static madpipe::plan::SimOp simulated_op(const Instance& x, const MicroBatchOps& m, double first) {
  madpipe::plan::SimOp op;
  op.kind = m.ops[x.position].kind;
  op.stage = m.ops[x.position].stage;
  op.micro_batch = x.micro_batch;
  op.resource = x.resource;
  op.start_ms = x.start - first;
  op.end_ms = x.end - first;
  return op;
}

// The simulated ops, times from the first start, sorted by start.
static std::vector<madpipe::plan::SimOp> simulated_ops(const Unrolled& u, const MicroBatchOps& m,
                                                       double first) {
  std::vector<madpipe::plan::SimOp> ops;
  ops.reserve(u.instances.size());
  for (const Instance& x : u.instances) ops.push_back(simulated_op(x, m, first));
  std::stable_sort(ops.begin(), ops.end(),
                   [&](const madpipe::plan::SimOp& a, const madpipe::plan::SimOp& b) {
                     return std::make_tuple(a.start_ms, a.resource, a.micro_batch, a.stage,
                                            static_cast<int>(a.kind)) <
                            std::make_tuple(b.start_ms, b.resource, b.micro_batch, b.stage,
                                            static_cast<int>(b.kind));
                   });
  return ops;
}

// Steady state: F of stage 0 for two micro-batches a multiple of k apart, around N/4 and 3N/4.
static void measure_steady_period(const Unrolled& u, int k, madpipe::plan::SimResult& result) {
  const int n = u.micro_batches;
  int m1 = n / 4;
  const int distance = std::max(k, (3 * n / 4 - m1) / k * k);
  while (m1 > 0 && m1 + distance > n - 1) --m1;
  if (m1 + distance > n - 1) return;
  const double t1 = u.instances[static_cast<std::size_t>(m1) * u.length].start;
  const double t2 = u.instances[static_cast<std::size_t>(m1 + distance) * u.length].start;
  result.steady_period_ms = (t2 - t1) * k / distance;
  result.steady_normalized_ms = result.steady_period_ms / k;
}

// Memory timeline: static memory, plus stored bytes from the start of F to the end of B and,
// on split stages, weight_kept_bytes from the end of B to the end of W.
static void memory_timeline(const madpipe::plan::Plan& plan, const Unrolled& u,
                            const MicroBatchOps& m, double first,
                            madpipe::plan::SimResult& result) {
  const int gpus = plan.platform.gpus;
  const double eps = 1e-9 * plan.pattern.period_ms;
  std::vector<std::vector<MemoryEvent>> events(gpus);
  auto add_event = [&](int gpu, double time, std::int64_t delta) {
    if (delta == 0) return;
    MemoryEvent e;
    e.time = time;
    e.is_start = delta > 0;
    e.order = e.is_start ? time : time - eps;
    e.delta = delta;
    events[gpu].push_back(e);
  };
  for (const Instance& x : u.instances) {
    const madpipe::schedule::Op& op = m.ops[x.position];
    const madpipe::schedule::Stage& stage = plan.stages[op.stage];
    const std::int64_t kept = kept_until_weight(stage);
    if (op.kind == madpipe::schedule::OpKind::F) {
      add_event(stage.gpu, x.start - first, stage.stored_bytes);
    } else if (op.kind == madpipe::schedule::OpKind::B) {
      add_event(stage.gpu, x.end - first, -stage.stored_bytes);
      add_event(stage.gpu, x.end - first, kept);
    } else if (op.kind == madpipe::schedule::OpKind::W) {
      add_event(stage.gpu, x.end - first, -kept);
    }
  }
  result.memory.resize(gpus);
  result.peak_memory_bytes.assign(gpus, 0);
  for (int g = 0; g < gpus; ++g) {
    auto& list = events[g];
    std::sort(list.begin(), list.end(), [](const MemoryEvent& a, const MemoryEvent& b) {
      return std::tie(a.order, a.is_start, a.time) < std::tie(b.order, b.is_start, b.time);
    });
    std::int64_t bytes = static_memory(plan.stages, g, plan.platform).total();
    std::int64_t peak = bytes;
    auto& timeline = result.memory[g];
    timeline.push_back(madpipe::plan::MemoryPoint{0.0, bytes});
    for (const MemoryEvent& e : list) {
      bytes += e.delta;
      peak = std::max(peak, bytes);
      const double time = std::max(timeline.back().time_ms, e.time);
      if (time == timeline.back().time_ms)
        timeline.back().bytes = bytes;
      else
        timeline.push_back(madpipe::plan::MemoryPoint{time, bytes});
    }
    result.peak_memory_bytes[g] = peak;
  }
}

std::int64_t madpipe::plan::step_memory_cap_bytes(const Plan& plan) {
  std::int64_t busiest = 0;
  for (std::int64_t peak : totals(evaluate_memory(plan.stages, plan.pattern, plan.platform)))
    busiest = std::max(busiest, peak);
  return plan.platform.memory_bytes > 0 ? std::min(busiest, plan.platform.memory_bytes) : busiest;
}

// The Asap budget of a plan: its predicted memory, but no more than step_memory_cap_bytes() (a
// prediction raised above that by what the step's program holds besides, predict_step(), does
// not let its W ops wait longer than planned).
static std::vector<std::int64_t> waiting_budget(const madpipe::plan::Plan& plan) {
  const std::int64_t cap = madpipe::plan::step_memory_cap_bytes(plan);
  std::vector<std::int64_t> budget = plan.predicted.memory_bytes;
  for (std::int64_t& bytes : budget) bytes = std::min(bytes, cap);
  return budget;
}

madpipe::plan::SimResult madpipe::plan::simulate(const Plan& plan, const SimOptions& options) {
  check_simulated(plan, options);
  const int k = plan.pattern.k;
  const int num_stages = static_cast<int>(plan.stages.size());
  const MicroBatchOps m = micro_batch_ops(plan);
  const std::vector<std::vector<int>> table = op_table(plan, m.ops);
  const std::vector<int> nca = concurrent_activations(plan.pattern, num_stages);
  const int max_in_flight = nca.empty() ? 1 : *std::max_element(nca.begin(), nca.end());
  const int n = options.micro_batches > 0 ? options.micro_batches
                                          : default_micro_batches(num_stages, max_in_flight, k);
  Unrolled u = unroll(plan, m, table, n);
  u.executed.resize(plan.platform.gpus);
  if (options.policy == StartPolicy::Asap && plan.step_order &&
      plan.step_order->micro_batches == n) {
    run_in_order(u, m, plan, *plan.step_order);
  } else if (options.policy == StartPolicy::Asap) {
    run_asap(
        u, m, plan,
        options.memory_budget_bytes.empty() ? waiting_budget(plan) : options.memory_budget_bytes);
  } else {
    run_timetable(u, m, plan);
    for (const auto& [resource, list] : u.by_resource)
      if (resource < plan.platform.gpus) u.executed[resource] = list;
  }

  SimResult result;
  result.micro_batches = n;
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  for (const Instance& x : u.instances) {
    first = std::min(first, x.start);
    last = std::max(last, x.end);
  }
  result.step_ms = last - first;
  result.ops = simulated_ops(u, m, first);
  result.per_gpu.resize(plan.platform.gpus);
  for (int g = 0; g < plan.platform.gpus; ++g)
    for (int id : u.executed[g])
      result.per_gpu[g].push_back(simulated_op(u.instances[id], m, first));
  measure_steady_period(u, k, result);
  memory_timeline(plan, u, m, first, result);
  return result;
}
