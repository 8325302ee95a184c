#include "plan/validate.hpp"

#include "core/chain.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "plan/step_order_check.hpp"
#include "remat/offload_replay.hpp"
#include "remat/remat_sequence.hpp"
#include "schedule/memory.hpp"
#include "schedule/pattern.hpp"
#include "schedule/shared_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

namespace {
using madpipe::format_number;
using madpipe::plan::Violation;

// Collects violations; `add` takes the JSON pointer and the problem text.
struct Report {
  std::vector<Violation> violations;
  void add(std::string field, std::string problem) {
    violations.push_back(Violation{std::move(field), std::move(problem)});
  }
};

// The ops of one (stage, kind) for one residue of micro-batches mod k.
using OpKey = std::tuple<int, int, int>;  // stage, kind, residue

// What the later checks may rely on for one op.
struct OpStatus {
  bool timed = false;  // names a stage; finite start in [0, period), finite duration in [0, period]
  bool placed = false;  // runs on the right gpu or link
};
}  // namespace

static constexpr double kCostTolerance = 1e-6;  // relative, stage costs and durations
static constexpr double kDurationAbsTolerance = 1e-9;
static constexpr double kTimeTolerance = 1e-9;  // relative to the period, overlaps and dependencies

static std::string op_ptr(std::size_t i) { return "/pattern/ops/" + std::to_string(i); }

static std::string stage_ptr(std::size_t s) { return "/stages/" + std::to_string(s); }

// shift mod k in [0, k), without overflow for any shift and k >= 1.
static int residue(int shift, int k) {
  const int r = shift % k;
  return r < 0 ? r + k : r;
}

static bool close_to(double value, double expected, double rel, double abs) {
  return std::fabs(value - expected) <= rel * std::max(std::fabs(value), std::fabs(expected)) + abs;
}

// resource_of() in 64 bits: gpus + a * gpus + b overflows an int from 46341 GPUs on.
static std::int64_t resource_key(const madpipe::schedule::Op& op, int gpus) {
  if (!madpipe::schedule::is_transfer(op.kind)) return op.gpu;
  return gpus + std::int64_t{op.link.a} * gpus + op.link.b;
}

static std::string resource_name(std::int64_t resource, int gpus) {
  if (resource < gpus) return "gpu " + std::to_string(resource);
  const std::int64_t link = resource - gpus;
  return "link [" + std::to_string(link / gpus) + ", " + std::to_string(link % gpus) + "]";
}

static std::string op_name(const madpipe::schedule::Op& op) {
  return madpipe::schedule::op_token(op.kind, op.stage);
}

// True when GPUs a and b sit on different nodes linked at an inter-node bandwidth of their own.
static bool crosses_nodes(const madpipe::Platform& platform, int a, int b) {
  return platform.inter_node_bandwidth_bytes_per_ms > 0 &&
         madpipe::node_of(platform, a) != madpipe::node_of(platform, b);
}

// Stage s's shared_weights: groups ascending, each with bytes in [1, weight_bytes] and the same
// bytes wherever the group appears (else the per-GPU memory, which holds each once, would be
// wrong). False when they cannot be trusted for memory.
static bool check_shared_weights(const std::vector<madpipe::schedule::Stage>& stages, std::size_t s,
                                 Report& report) {
  const madpipe::schedule::Stage& stage = stages[s];
  bool sound = true;
  for (std::size_t i = 0; i < stage.shared_weights.size(); ++i) {
    const madpipe::schedule::SharedWeight& weight = stage.shared_weights[i];
    const std::string p = stage_ptr(s) + "/shared_weights/" + std::to_string(i);
    if (weight.group < 0 || (i > 0 && weight.group <= stage.shared_weights[i - 1].group)) {
      report.add(p + "/group",
                 "must be >= 0 and above the entry before it, got " + std::to_string(weight.group));
      sound = false;
    }
    if (weight.bytes < 1 || weight.bytes > stage.weight_bytes) {
      report.add(p + "/bytes", "must be in [1, weight_bytes] = [1, " +
                                   std::to_string(stage.weight_bytes) + "], got " +
                                   std::to_string(weight.bytes));
      sound = false;
    }
    for (std::size_t t = 0; t < s; ++t)
      for (const madpipe::schedule::SharedWeight& other : stages[t].shared_weights)
        if (other.group == weight.group && other.bytes != weight.bytes) {
          report.add(p + "/bytes", "must equal group " + std::to_string(weight.group) +
                                       "'s bytes in stage " + std::to_string(t) + " (" +
                                       std::to_string(other.bytes) + "), got " +
                                       std::to_string(weight.bytes));
          sound = false;
        }
  }
  return sound;
}

static void check_platform_fields(const madpipe::Platform& platform, Report& report) {
  for (const madpipe::PlatformProblem& problem : madpipe::platform_problems(platform))
    report.add("/platform/" + problem.field, problem.problem);
}

// Stages numbered in chain order, contiguous layer ranges from layer 0, GPUs in range. Returns
// true when the stage list is sound enough for the pattern checks.
static bool check_stages(const madpipe::plan::Plan& plan, Report& report) {
  const auto& stages = plan.stages;
  if (stages.empty()) {
    report.add("/stages", "must list at least one stage");
    return false;
  }
  bool sound = true;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const madpipe::schedule::Stage& stage = stages[s];
    const std::string p = stage_ptr(s);
    if (stage.id != static_cast<int>(s))
      report.add(p + "/id", "must be " + std::to_string(s) +
                                " (stages are numbered in chain order), got " +
                                std::to_string(stage.id));
    const std::int64_t expected_first = s == 0 ? 0 : std::int64_t{stages[s - 1].last_layer} + 1;
    if (stage.first_layer != expected_first)
      report.add(p + "/first_layer", (s == 0 ? std::string("the first stage must start at layer 0")
                                             : "must be " + std::to_string(expected_first) +
                                                   " (the layer after the last layer of stage " +
                                                   std::to_string(s - 1) + ")") +
                                         ", got " + std::to_string(stage.first_layer));
    if (stage.last_layer < stage.first_layer)
      report.add(p + "/last_layer", "must be >= first_layer (" + std::to_string(stage.first_layer) +
                                        "), got " + std::to_string(stage.last_layer));
    if (stage.gpu < 0 || stage.gpu >= plan.platform.gpus) {
      report.add(p + "/gpu", "must be in [0, " + std::to_string(plan.platform.gpus) + "), got " +
                                 std::to_string(stage.gpu));
      sound = false;
    }
    const std::pair<const char*, double> times[] = {{"forward_ms", stage.forward_ms},
                                                    {"backward_ms", stage.backward_ms}};
    for (const auto& [key, value] : times) {
      if (std::isfinite(value) && value >= 0) continue;
      report.add(p + "/" + key, "must be a finite number >= 0, got " + format_number(value));
      sound = false;
    }
    const std::pair<const char*, std::int64_t> sizes[] = {
        {"weight_bytes", stage.weight_bytes},
        {"stored_bytes", stage.stored_bytes},
        {"output_bytes", stage.output_bytes},
        {"workspace_bytes", stage.workspace_bytes},
        {"weight_kept_bytes", stage.weight_kept_bytes}};
    for (const auto& [key, value] : sizes)
      if (value < 0) report.add(p + "/" + key, "must be >= 0, got " + std::to_string(value));
    if (!std::isfinite(stage.backward_weight_ms) || stage.backward_weight_ms < 0 ||
        stage.backward_weight_ms > stage.backward_ms) {
      report.add(p + "/backward_weight_ms", "must be a finite number in [0, backward_ms] = [0, " +
                                                format_number(stage.backward_ms) + "], got " +
                                                format_number(stage.backward_weight_ms));
      sound = false;
    } else if (stage.splits_backward() && stage.uses_sequence()) {
      report.add(p + "/backward_weight_ms",
                 "a stage that rematerializes or offloads runs its backward whole; remove "
                 "backward_weight_ms or the strategy");
    }
    if (!check_shared_weights(stages, s, report)) sound = false;
  }
  return sound;
}

// A stage's strategies and sequence agree, and its effective costs are the replay of its sequence.
// An offloading stage: its memory is the replay's with memory freed when a copy completes, and
// its times at least the replay's without waits for memory (the planner's budget may add some).
// Waiting for memory delays the forward, and with it the offloads that the loss waits for, so
// it moves time from the backward into the forward: the backward is checked within the total.
static void check_offload_sequence(const madpipe::schedule::Stage& stage,
                                   const madpipe::remat::RematChain& chain,
                                   const madpipe::remat::RematSequence& sequence,
                                   double host_bytes_per_ms, const std::string& p, Report& report) {
  using namespace madpipe::plan;
  if (!(host_bytes_per_ms > 0)) {
    report.add("/platform/host_bandwidth_bytes_per_ms",
               "is required: stage " + std::to_string(stage.id) + " offloads");
    return;
  }
  const madpipe::remat::OffloadReplay replay = replay_offload_sequence(
      chain, sequence, std::numeric_limits<std::int64_t>::max() / 4, host_bytes_per_ms);
  if (!replay.valid) {
    report.add(p + "/sequence", replay.problem);
    return;
  }
  auto at_least = [&](const char* key, double value, double expected) {
    if (value < expected * (1 - kCostTolerance) - 1e-9)
      report.add(p + "/" + key, "must be at least the replay of the sequence (" +
                                    format_number(expected) + "), got " + format_number(value));
  };
  at_least("forward_ms", stage.forward_ms, replay.forward_ms);
  const double total = replay.forward_ms + replay.backward_ms;
  if (stage.forward_ms + stage.backward_ms < total * (1 - kCostTolerance) - 1e-9)
    report.add(p + "/backward_ms",
               "with forward_ms, must be at least the replay of the sequence (" +
                   format_number(total) + " in all), got " +
                   format_number(stage.forward_ms + stage.backward_ms));
  if (stage.stored_bytes != replay.stored_bytes)
    report.add(p + "/stored_bytes", "must equal the replay of the sequence (" +
                                        std::to_string(replay.stored_bytes) + "), got " +
                                        std::to_string(stage.stored_bytes));
  const std::int64_t transient = replay.peak_bytes_release_at_completion - replay.stored_bytes;
  if (stage.workspace_bytes < transient)
    report.add(p + "/workspace_bytes", "must cover the sequence's transient memory (" +
                                           std::to_string(transient) + "), got " +
                                           std::to_string(stage.workspace_bytes));
}

static void check_sequence(const madpipe::schedule::Stage& stage, const madpipe::Profile& profile,
                           double host_bytes_per_ms, const std::string& p, Report& report) {
  using namespace madpipe::plan;
  const bool plain = !stage.uses_sequence();
  if (stage.sequence.empty()) {
    if (!plain) report.add(p + "/sequence", "is required when remat or offload is not \"none\"");
    return;
  }
  if (plain) {
    report.add(p + "/sequence", "must be absent when remat and offload are both \"none\"");
    return;
  }
  const madpipe::remat::RematChain chain =
      madpipe::remat::stage_remat_chain(profile, stage.first_layer, stage.last_layer);
  madpipe::remat::RematSequence sequence;
  try {
    sequence = parse_remat_sequence(stage.sequence, chain);
  } catch (const madpipe::Error& e) {
    report.add(p + "/sequence", e.problem());
    return;
  }
  const bool offloads =
      std::any_of(sequence.begin(), sequence.end(), [](const madpipe::remat::RematOp& op) {
        return op.kind == madpipe::remat::RematOpKind::Offload ||
               op.kind == madpipe::remat::RematOpKind::Prefetch;
      });
  if (offloads && stage.offload != madpipe::schedule::OffloadStrategy::Host)
    report.add(p + "/offload/strategy", "must be \"host\": the sequence offloads");
  if (offloads) {
    check_offload_sequence(stage, chain, sequence, host_bytes_per_ms, p, report);
    return;
  }
  if (stage.offload == madpipe::schedule::OffloadStrategy::Host)
    report.add(p + "/offload/strategy", "must be \"none\": the sequence never offloads");
  const madpipe::remat::SequenceReplay replay = replay_sequence(chain, sequence);
  if (!replay.valid) {
    report.add(p + "/sequence", replay.problem);
    return;
  }
  auto check = [&](const char* key, double value, double expected) {
    if (!close_to(value, expected, kCostTolerance, 1e-9))
      report.add(p + "/" + key, "must equal the replay of the sequence (" +
                                    format_number(expected) + "), got " + format_number(value));
  };
  check("forward_ms", stage.forward_ms, replay.forward_ms);
  check("backward_ms", stage.backward_ms, replay.backward_ms);
  check("stored_bytes", static_cast<double>(stage.stored_bytes),
        static_cast<double>(replay.stored_bytes));
  if (stage.workspace_bytes < replay.transient_bytes())
    report.add(p + "/workspace_bytes", "must cover the sequence's transient memory (" +
                                           std::to_string(replay.transient_bytes()) + "), got " +
                                           std::to_string(stage.workspace_bytes));
}

static void check_against_profile(const madpipe::plan::Plan& plan, const madpipe::Profile& profile,
                                  Report& report) {
  const int num_layers = static_cast<int>(profile.layers.size());
  if (plan.stages.empty()) return;
  const int last = plan.stages.back().last_layer;
  if (last != num_layers - 1)
    report.add(stage_ptr(plan.stages.size() - 1) + "/last_layer",
               "the last stage must end at the last layer of profile '" + profile.name + "' (" +
                   std::to_string(num_layers - 1) + "), got " + std::to_string(last));
  const madpipe::ChainCosts costs(profile);
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const madpipe::schedule::Stage& stage = plan.stages[s];
    const std::string p = stage_ptr(s);
    if (stage.first_layer < 0 || stage.last_layer >= num_layers ||
        stage.first_layer > stage.last_layer) {
      if (stage.last_layer >= num_layers && s + 1 != plan.stages.size())
        report.add(p + "/last_layer", "must be < " + std::to_string(num_layers) +
                                          " (layers of profile '" + profile.name + "'), got " +
                                          std::to_string(stage.last_layer));
      continue;
    }
    const int f = stage.first_layer, l = stage.last_layer;
    const std::string range =
        " of layers " + std::to_string(f) + ".." + std::to_string(l) + " in the profile";
    // Rematerialization and offloading trade time for memory: a stage using them may take longer
    // and store less than the plain sums, never the reverse.
    const bool plain = !stage.uses_sequence();
    auto check_ms = [&](const char* key, double value, double expected) {
      if (close_to(value, expected, kCostTolerance, 0.0)) return;
      if (plain)
        report.add(p + "/" + key, "must equal the sum" + range + " (" + format_number(expected) +
                                      "), got " + format_number(value));
      else if (value < expected)
        report.add(p + "/" + key, "must be at least the sum" + range + " (" +
                                      format_number(expected) + "), got " + format_number(value));
    };
    auto check_bytes = [&](const char* key, std::int64_t value, std::int64_t expected,
                           const char* what) {
      if (close_to(static_cast<double>(value), static_cast<double>(expected), kCostTolerance, 0.0))
        return;
      report.add(p + "/" + key, std::string("must equal ") + what + range + " (" +
                                    std::to_string(expected) + "), got " + std::to_string(value));
    };
    check_ms("forward_ms", stage.forward_ms, costs.forward_ms(f, l));
    check_ms("backward_ms", stage.backward_ms, costs.backward_ms(f, l));
    if (stage.splits_backward()) {
      const double weight_ms = costs.backward_weight_ms(f, l);
      if (!close_to(stage.backward_weight_ms, weight_ms, kCostTolerance, 0.0))
        report.add(p + "/backward_weight_ms", "must equal the sum of backward_weight_ms" + range +
                                                  " (" + format_number(weight_ms) + "), got " +
                                                  format_number(stage.backward_weight_ms));
      const std::int64_t kept = costs.weight_kept_bytes(f, l);
      if (!close_to(static_cast<double>(stage.weight_kept_bytes), static_cast<double>(kept),
                    kCostTolerance, 0.0))
        report.add(p + "/weight_kept_bytes", "must equal the sum of backward_weight_kept_bytes" +
                                                 range + " (" + std::to_string(kept) + "), got " +
                                                 std::to_string(stage.weight_kept_bytes));
    }
    check_bytes("weight_bytes", stage.weight_bytes, costs.weight_bytes(f, l),
                costs.tied_weights().empty() ? "the sum" : "the sum (each tied weight once)");
    std::vector<madpipe::schedule::SharedWeight> shared;
    for (int group : costs.tied_groups_in(f, l))
      shared.push_back(madpipe::schedule::SharedWeight{group, costs.tied_weights()[group].bytes});
    if (stage.shared_weights != shared) {
      std::string expected;
      for (const madpipe::schedule::SharedWeight& weight : shared)
        expected += (expected.empty() ? "" : ", ") + std::string("group ") +
                    std::to_string(weight.group) + " of " + std::to_string(weight.bytes) + " bytes";
      report.add(p + "/shared_weights",
                 "must list the profile's tied_weights that layers" + range + " use (" +
                     (expected.empty() ? std::string("none") : expected) + "), got " +
                     std::to_string(stage.shared_weights.size()) + " entries");
    }
    check_bytes("output_bytes", stage.output_bytes, costs.activation_bytes(l),
                "the output of the last layer");
    const std::int64_t stored = costs.stored_bytes(f, l);
    check_sequence(stage, profile, plan.platform.host_bandwidth_bytes_per_ms, p, report);
    if (plain) {
      check_bytes("stored_bytes", stage.stored_bytes, stored, "inputs plus saved bytes");
    } else if (static_cast<double>(stage.stored_bytes) >
               static_cast<double>(stored) * (1 + kCostTolerance)) {
      report.add(p + "/stored_bytes", "must not exceed inputs plus saved bytes" + range + " (" +
                                          std::to_string(stored) + "), got " +
                                          std::to_string(stage.stored_bytes));
    }
  }
}

// True when stage s sends its output to another GPU.
static bool crosses_gpus(const std::vector<madpipe::schedule::Stage>& stages, int s) {
  return s + 1 < static_cast<int>(stages.size()) && stages[s].gpu != stages[s + 1].gpu;
}

// Per-op checks. Fills `status` and `by_key` (ops that name a stage, by stage, kind and residue).
static void check_ops(const madpipe::plan::Plan& plan, bool timing, std::vector<OpStatus>& status,
                      std::map<OpKey, std::vector<std::size_t>>& by_key, Report& report) {
  using madpipe::schedule::OpKind;
  const auto& stages = plan.stages;
  const auto& pattern = plan.pattern;
  const int num_stages = static_cast<int>(stages.size());
  const double period = pattern.period_ms;
  status.assign(pattern.ops.size(), OpStatus{});
  for (std::size_t i = 0; i < pattern.ops.size(); ++i) {
    const madpipe::schedule::Op& op = pattern.ops[i];
    const std::string p = op_ptr(i);
    bool timed = true;
    bool placed = true;
    if (!std::isfinite(op.start_ms) || op.start_ms < 0 || (timing && op.start_ms >= period)) {
      report.add(p + "/start_ms",
                 (timing ? "must lie in [0, period_ms) = [0, " + format_number(period) + ")"
                         : std::string("must be a finite number >= 0")) +
                     ", got " + format_number(op.start_ms));
      timed = false;
    }
    if (!std::isfinite(op.duration_ms) || op.duration_ms < 0) {
      report.add(p + "/duration_ms",
                 "must be a finite number >= 0, got " + format_number(op.duration_ms));
      timed = false;
    } else if (timing && op.duration_ms > period) {
      report.add(p + "/duration_ms", "must be <= period_ms (" + format_number(period) + "), got " +
                                         format_number(op.duration_ms));
      timed = false;
    }
    if (op.stage < 0 || op.stage >= num_stages) {
      report.add(p + "/stage", "must name a stage in [0, " + std::to_string(num_stages) +
                                   "), got " + std::to_string(op.stage));
      continue;
    }
    const madpipe::schedule::Stage& stage = stages[op.stage];
    const std::string stage_text = "stage " + std::to_string(op.stage);
    double expected = 0;
    const char* expected_what = "";
    if (madpipe::schedule::is_transfer(op.kind)) {
      if (!crosses_gpus(stages, op.stage)) {
        report.add(p + "/kind",
                   std::string(madpipe::schedule::to_string(op.kind)) + " is not allowed for " +
                       stage_text +
                       (op.stage + 1 == num_stages ? " (the last stage)"
                                                   : " (the next stage is on the same gpu)"));
        continue;
      }
      const int a = std::min(stage.gpu, stages[op.stage + 1].gpu);
      const int b = std::max(stage.gpu, stages[op.stage + 1].gpu);
      if (op.link.a != a || op.link.b != b) {
        report.add(p + "/link", "must be [" + std::to_string(a) + ", " + std::to_string(b) +
                                    "] (the gpus of stages " + std::to_string(op.stage) + " and " +
                                    std::to_string(op.stage + 1) + "), got [" +
                                    std::to_string(op.link.a) + ", " + std::to_string(op.link.b) +
                                    "]");
        placed = false;
      }
      const int to = stages[op.stage + 1].gpu;
      expected = madpipe::schedule::transfer_ms(stage.output_bytes, plan.platform, stage.gpu, to);
      expected_what = crosses_nodes(plan.platform, stage.gpu, to)
                          ? "output_bytes / inter_node_bandwidth_bytes_per_ms"
                          : "output_bytes / bandwidth_bytes_per_ms";
    } else {
      if (op.gpu != stage.gpu) {
        report.add(p + "/gpu", "must be the gpu of " + stage_text + " (" +
                                   std::to_string(stage.gpu) + "), got " + std::to_string(op.gpu));
        placed = false;
      }
      if (op.kind == OpKind::W && !stage.splits_backward()) {
        report.add(p + "/kind", "W is not allowed for " + stage_text +
                                    " (its backward is not split: no backward_weight_ms)");
        continue;
      }
      expected = madpipe::schedule::compute_op_ms(stage, op.kind);
      if (op.kind == OpKind::F)
        expected_what = "forward_ms";
      else if (op.kind == OpKind::W)
        expected_what = "backward_weight_ms";
      else
        expected_what =
            stage.splits_backward() ? "backward_ms - backward_weight_ms" : "backward_ms";
    }
    if (std::isfinite(op.duration_ms) &&
        !close_to(op.duration_ms, expected, kCostTolerance, kDurationAbsTolerance))
      report.add(p + "/duration_ms", std::string("must equal ") + expected_what + " of " +
                                         stage_text + " (" + format_number(expected) + "), got " +
                                         format_number(op.duration_ms));
    if (pattern.k >= 1)
      by_key[{op.stage, static_cast<int>(op.kind), residue(op.shift, pattern.k)}].push_back(i);
    status[i] = OpStatus{timed, placed};
  }
}

// Every needed (stage, kind) has exactly one op per residue mod k. Missing residues are listed
// one by one up to kMaxListedResidues, then counted.
static constexpr int kMaxListedResidues = 16;

static void check_coverage(const madpipe::plan::Plan& plan,
                           const std::map<OpKey, std::vector<std::size_t>>& by_key,
                           Report& report) {
  using madpipe::schedule::OpKind;
  const int k = plan.pattern.k;
  const int num_stages = static_cast<int>(plan.stages.size());
  const std::string mod = " for micro-batches i with i mod " + std::to_string(k) + " = ";
  for (int s = 0; s < num_stages; ++s) {
    for (madpipe::schedule::OpKind kind :
         {madpipe::schedule::OpKind::F, madpipe::schedule::OpKind::B,
          madpipe::schedule::OpKind::SendAct, madpipe::schedule::OpKind::SendGrad,
          madpipe::schedule::OpKind::W}) {
      if (madpipe::schedule::is_transfer(kind) && !crosses_gpus(plan.stages, s)) continue;
      if (kind == OpKind::W && !plan.stages[s].splits_backward()) continue;
      const std::string name = madpipe::schedule::op_token(kind, s);
      const int kind_id = static_cast<int>(kind);
      const auto first = by_key.lower_bound({s, kind_id, 0});
      const auto last = by_key.lower_bound({s, kind_id + 1, 0});
      int present = 0;
      for (auto it = first; it != last; ++it) {
        ++present;
        const int r = std::get<2>(it->first);
        for (std::size_t d = 1; d < it->second.size(); ++d)
          report.add(op_ptr(it->second[d]) + "/shift",
                     name + " already runs micro-batches i with i mod " + std::to_string(k) +
                         " = " + std::to_string(r) + " (op " + std::to_string(it->second[0]) +
                         "); each stage needs exactly " + std::to_string(k) + " " + name +
                         " ops whose shifts cover every residue mod k once");
      }
      if (present == k) continue;
      if (k == 1) {
        report.add("/pattern/ops", "missing " + name);
      } else if (k <= kMaxListedResidues) {
        for (int r = 0; r < k; ++r)
          if (by_key.find({s, kind_id, r}) == by_key.end())
            report.add("/pattern/ops", "missing " + name + mod + std::to_string(r));
      } else {
        report.add("/pattern/ops", "missing " + name + " for " + std::to_string(k - present) +
                                       " of the " + std::to_string(k) +
                                       " residues of micro-batches mod k");
      }
    }
  }
}

// Start of an arc of the circle of length `period` lying strictly inside another arc.
static bool starts_inside(double start, double duration, double other_start, double other_duration,
                          double period, double eps) {
  double delta = std::fmod(start - other_start, period);
  if (delta < 0) delta += period;
  if (delta >= period) delta -= period;
  if (delta >= other_duration - eps) return false;
  return duration > eps || delta > eps;
}

static void check_overlaps(const madpipe::plan::Plan& plan, const std::vector<OpStatus>& status,
                           Report& report) {
  const auto& ops = plan.pattern.ops;
  const double period = plan.pattern.period_ms;
  const double eps = kTimeTolerance * period;
  const int gpus = plan.platform.gpus;
  std::map<std::int64_t, std::vector<std::size_t>> by_resource;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!status[i].timed || !status[i].placed) continue;
    by_resource[resource_key(ops[i], gpus)].push_back(i);
  }
  for (const auto& [resource, list] : by_resource) {
    for (std::size_t x = 0; x < list.size(); ++x) {
      for (std::size_t y = x + 1; y < list.size(); ++y) {
        const auto& a = ops[list[x]];
        const auto& b = ops[list[y]];
        const bool overlap =
            starts_inside(b.start_ms, b.duration_ms, a.start_ms, a.duration_ms, period, eps) ||
            starts_inside(a.start_ms, a.duration_ms, b.start_ms, b.duration_ms, period, eps);
        if (!overlap) continue;
        report.add(op_ptr(list[y]), op_name(b) + " [" + format_number(b.start_ms) + ", " +
                                        format_number(b.start_ms + b.duration_ms) + ") overlaps " +
                                        op_name(a) + " [" + format_number(a.start_ms) + ", " +
                                        format_number(a.start_ms + a.duration_ms) + ") (op " +
                                        std::to_string(list[x]) + ") on " +
                                        resource_name(resource, gpus) + " modulo the period " +
                                        format_number(period));
      }
    }
  }
}

// For each residue r, a micro-batch i = r (mod k) goes through the chain; each op must start
// after the end of its predecessor. Pairs with a missing or ambiguous op are skipped (the
// coverage checks report those).
static void check_dependencies(const madpipe::plan::Plan& plan, const std::vector<OpStatus>& status,
                               const std::map<OpKey, std::vector<std::size_t>>& by_key,
                               Report& report) {
  const auto chain = madpipe::schedule::micro_batch_chain(plan.stages, plan.platform);
  const auto& ops = plan.pattern.ops;
  const int k = plan.pattern.k;
  const double period = plan.pattern.period_ms;
  const double eps = kTimeTolerance * period;
  // Each residue needs its own ops: with more residues than ops most have none (reported by the
  // coverage checks), and there is nothing to follow.
  if (static_cast<std::size_t>(k) > ops.size()) return;
  for (int r = 0; r < k; ++r) {
    constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::vector<std::size_t> index;
    for (const madpipe::schedule::Op& c : chain) {
      const auto it = by_key.find({c.stage, static_cast<int>(c.kind), r});
      const bool one = it != by_key.end() && it->second.size() == 1 && status[it->second[0]].timed;
      index.push_back(one ? it->second[0] : kNone);
    }
    // Follow the first micro-batch i = r (mod k) that every op runs in a period j >= 0, so that
    // messages show times as they appear in the pattern.
    long long i = r;
    for (std::size_t c : index) {
      if (c == kNone) continue;
      const long long shift = ops[c].shift;
      if (shift > i) i = r + (shift - r + k - 1) / k * k;
    }
    double previous_end = 0;
    for (std::size_t c = 0; c < index.size(); ++c) {
      if (index[c] == kNone) continue;
      const madpipe::schedule::Op& op = ops[index[c]];
      const long long period_index = (i - op.shift) / k;
      const double start = static_cast<double>(period_index) * period + op.start_ms;
      if (c > 0 && index[c - 1] != kNone && start < previous_end - eps) {
        const madpipe::schedule::Op& before = ops[index[c - 1]];
        report.add(op_ptr(index[c]) + "/start_ms",
                   madpipe::schedule::op_token(op.kind, op.stage, static_cast<int>(i)) +
                       " starts at " + format_number(start) + " before " +
                       madpipe::schedule::op_token(before.kind, before.stage, static_cast<int>(i)) +
                       ", which it depends on, ends at " + format_number(previous_end) +
                       " (absolute times of micro-batch " + std::to_string(i) + ")");
      }
      previous_end = start + op.duration_ms;
    }
  }
}

// W of a split stage starts after B of the same micro-batch ends.
static void check_weight_dependencies(const madpipe::plan::Plan& plan,
                                      const std::vector<OpStatus>& status,
                                      const std::map<OpKey, std::vector<std::size_t>>& by_key,
                                      Report& report) {
  using madpipe::schedule::OpKind;
  const auto& ops = plan.pattern.ops;
  const int k = plan.pattern.k;
  const double period = plan.pattern.period_ms;
  const double eps = kTimeTolerance * period;
  auto one_op = [&](int stage, OpKind kind, int r) -> const madpipe::schedule::Op* {
    const auto it = by_key.find({stage, static_cast<int>(kind), r});
    if (it == by_key.end() || it->second.size() != 1 || !status[it->second[0]].timed)
      return nullptr;
    return &ops[it->second[0]];
  };
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) {
    if (!plan.stages[s].splits_backward()) continue;
    for (int r = 0; r < k; ++r) {
      const madpipe::schedule::Op* b = one_op(s, OpKind::B, r);
      const madpipe::schedule::Op* w = one_op(s, OpKind::W, r);
      if (!b || !w) continue;
      // Micro-batch i runs an op of shift x in period (i - x) / k: W starts this long after B.
      const double periods = (static_cast<double>(b->shift) - static_cast<double>(w->shift)) / k;
      const double gap = periods * period + w->start_ms - (b->start_ms + b->duration_ms);
      if (gap >= -eps) continue;
      const auto it = by_key.find({s, static_cast<int>(OpKind::W), r});
      report.add(op_ptr(it->second[0]) + "/start_ms",
                 madpipe::schedule::op_token(OpKind::W, s) + " starts " + format_number(-gap) +
                     " ms before " + madpipe::schedule::op_token(OpKind::B, s) +
                     " of the same micro-batch ends (micro-batches i with i mod " +
                     std::to_string(k) + " = " + std::to_string(r) + "); W depends on B");
    }
  }
}

// Every stage has exactly one timed F and one timed B (and W when split) per residue: what
// evaluate_memory needs.
static bool complete_pattern(const madpipe::plan::Plan& plan, const std::vector<OpStatus>& status,
                             const std::map<OpKey, std::vector<std::size_t>>& by_key) {
  using madpipe::schedule::OpKind;
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s)
    for (madpipe::schedule::OpKind kind :
         {madpipe::schedule::OpKind::F, madpipe::schedule::OpKind::B,
          madpipe::schedule::OpKind::W}) {
      if (kind == OpKind::W && !plan.stages[s].splits_backward()) continue;
      for (int r = 0; r < plan.pattern.k; ++r) {
        const auto it = by_key.find({s, static_cast<int>(kind), r});
        if (it == by_key.end() || it->second.size() != 1 || !status[it->second[0]].timed)
          return false;
      }
    }
  return true;
}

static void check_predicted(const madpipe::plan::Plan& plan, bool pattern_ok, Report& report) {
  const auto& predicted = plan.predicted;
  const int gpus = plan.platform.gpus;
  const auto& memory = predicted.memory_bytes;
  if (gpus >= 1 && static_cast<int>(memory.size()) != gpus)
    report.add("/predicted/memory_bytes", "must have one entry per gpu (" + std::to_string(gpus) +
                                              "), got " + std::to_string(memory.size()));
  for (std::size_t g = 0; g < memory.size(); ++g) {
    const std::string p = "/predicted/memory_bytes/" + std::to_string(g);
    if (memory[g] < 0) report.add(p, "must be >= 0, got " + std::to_string(memory[g]));
    if (plan.platform.memory_bytes > 0 && memory[g] > plan.platform.memory_bytes)
      report.add(p, "must not exceed the gpu memory (platform memory_bytes " +
                        std::to_string(plan.platform.memory_bytes) + "), got " +
                        std::to_string(memory[g]));
  }
  if (pattern_ok && static_cast<int>(memory.size()) == gpus) {
    const auto required =
        madpipe::schedule::evaluate_memory(plan.stages, plan.pattern, plan.platform);
    for (int g = 0; g < gpus; ++g) {
      const std::int64_t need = required[g].lower_bound();
      if (memory[g] >= need) continue;
      report.add("/predicted/memory_bytes/" + std::to_string(g),
                 "must be at least what the pattern needs on gpu " + std::to_string(g) + " (" +
                     std::to_string(need) + ": weights " + std::to_string(required[g].weights) +
                     " + activations " + std::to_string(required[g].activations) + "), got " +
                     std::to_string(memory[g]));
    }
  }
  const bool period_sane =
      std::isfinite(plan.pattern.period_ms) && plan.pattern.period_ms > 0 && plan.pattern.k >= 1;
  if (!std::isfinite(predicted.period_ms) || predicted.period_ms <= 0) {
    report.add("/predicted/period_ms",
               "must be a finite number > 0, got " + format_number(predicted.period_ms));
  } else {
    if (period_sane) {
      const double exchange = madpipe::schedule::tied_exchange_ms(plan.stages, plan.platform);
      if (!close_to(predicted.tied_exchange_ms, exchange, kCostTolerance, 0.0))
        report.add("/predicted/tied_exchange_ms",
                   "must equal the exchange of the tied weights that lie on several GPUs (" +
                       format_number(exchange) + "), got " +
                       format_number(predicted.tied_exchange_ms));
      const double expected = plan.pattern.period_ms / plan.pattern.k +
                              (exchange > 0 && predicted.micro_batches_per_step > 0
                                   ? exchange / predicted.micro_batches_per_step
                                   : 0.0);
      if (!close_to(predicted.period_ms, expected, kCostTolerance, 0.0))
        report.add("/predicted/period_ms",
                   std::string(exchange > 0 ? "must equal pattern period_ms / k + tied_exchange_ms "
                                              "/ micro_batches_per_step ("
                                            : "must equal pattern period_ms / k (") +
                       format_number(expected) + "), got " + format_number(predicted.period_ms));
    }
    const double throughput = 1000.0 / predicted.period_ms;
    if (!close_to(predicted.throughput_per_s, throughput, kCostTolerance, 0.0))
      report.add("/predicted/throughput_per_s", "must equal 1000 / predicted period_ms (" +
                                                    format_number(throughput) + "), got " +
                                                    format_number(predicted.throughput_per_s));
  }
  const double bound = predicted.lower_bound_period_ms;
  if (!std::isfinite(bound) || bound < 0) {
    report.add("/predicted/lower_bound_period_ms",
               "must be a finite number >= 0, got " + format_number(bound));
  } else if (std::isfinite(predicted.period_ms) &&
             bound > predicted.period_ms * (1 + kCostTolerance)) {
    report.add("/predicted/lower_bound_period_ms", "must not exceed the predicted period_ms (" +
                                                       format_number(predicted.period_ms) +
                                                       "), got " + format_number(bound));
  }
  if (plan.solver) {
    const std::string& status = plan.solver->status;
    if (status != "optimal" && status != "feasible" && status != "infeasible" &&
        status != "timeout" && status != "error")
      report.add("/solver/status", "unknown solver status '" + status +
                                       "' (valid: optimal, feasible, infeasible, timeout, error)");
  }
}

static std::vector<Violation> validate_plan(const madpipe::plan::Plan& plan,
                                            const madpipe::Profile* profile) {
  Report report;
  check_platform_fields(plan.platform, report);
  const auto& pattern = plan.pattern;
  const bool period_ok = std::isfinite(pattern.period_ms) && pattern.period_ms > 0;
  if (!period_ok)
    report.add("/pattern/period_ms",
               "must be a finite number > 0, got " + format_number(pattern.period_ms));
  if (pattern.k < 1) report.add("/pattern/k", "must be >= 1, got " + std::to_string(pattern.k));
  const bool timing = period_ok && pattern.k >= 1;

  const bool stages_ok = check_stages(plan, report);
  if (profile != nullptr) check_against_profile(plan, *profile, report);

  bool pattern_ok = false;
  if (stages_ok && plan.platform.gpus >= 1) {
    std::vector<OpStatus> status;
    std::map<OpKey, std::vector<std::size_t>> by_key;
    check_ops(plan, timing, status, by_key, report);
    if (timing) {
      check_coverage(plan, by_key, report);
      check_overlaps(plan, status, report);
      check_dependencies(plan, status, by_key, report);
      check_weight_dependencies(plan, status, by_key, report);
      pattern_ok = complete_pattern(plan, status, by_key);
    }
  }
  check_predicted(plan, pattern_ok, report);
  for (Violation& violation : madpipe::plan::step_order_violations(plan, stages_ok && pattern_ok))
    report.add(std::move(violation.field), std::move(violation.problem));
  return report.violations;
}

std::vector<madpipe::plan::Violation> madpipe::plan::validate(const Plan& plan) {
  return validate_plan(plan, nullptr);
}

std::vector<madpipe::plan::Violation> madpipe::plan::validate(const Plan& plan,
                                                              const Profile& profile) {
  return validate_plan(plan, &profile);
}

void madpipe::plan::throw_if_invalid(const std::vector<Violation>& violations,
                                     const std::string& file) {
  if (violations.empty()) return;
  std::string list;
  for (const Violation& v : violations) {
    if (!list.empty()) list += "; ";
    list += v.field.empty() ? v.problem : v.field + ": " + v.problem;
  }
  const std::size_t n = violations.size();
  throw Error(
      ErrorKind::InvalidInput, file, violations.front().field,
      "invalid plan: " + std::to_string(n) + (n == 1 ? " violation: " : " violations: ") + list);
}
