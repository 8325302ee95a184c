#include "plan/torch_schedule.hpp"

#include "core/error.hpp"
#include "plan/program.hpp"

#include <utility>

#include <nlohmann/json.hpp>

namespace madpipe::plan {
namespace {

// torch's _Action.from_str format: stage, computation type, micro-batch ("0F3", "12B0"). A
// split stage's B computes the input gradient only: torch's "I", and its W is torch's "W".
std::string action_token(const Instr& instr, bool split) {
  const char* type = instr.kind == InstrKind::Forward          ? "F"
                     : instr.kind == InstrKind::BackwardWeight ? "W"
                     : split                                   ? "I"
                                                               : "B";
  return std::to_string(instr.stage) + type + std::to_string(instr.micro_batch);
}

std::string stage_note(const schedule::Stage& stage) {
  const bool recomputes = stage.remat != schedule::RematStrategy::None;
  const bool offloads = stage.offload != schedule::OffloadStrategy::None;
  const std::string remat = name_of(schedule::kRematStrategyNames, stage.remat);
  const std::string offload = name_of(schedule::kOffloadStrategyNames, stage.offload);
  std::string what, strategies;
  if (recomputes && offloads) {
    what = "recomputes activations and offloads them to host memory";
    strategies = "remat " + remat + ", offload " + offload;
  } else if (recomputes) {
    what = "recomputes activations";
    strategies = "remat " + remat;
  } else {
    what = "offloads activations to host memory";
    strategies = "offload " + offload;
  }
  return "stage " + std::to_string(stage.id) + " " + what + " (" + strategies +
         ") in madpipe; torch.distributed.pipelining runs its module as given, which keeps every "
         "activation on the GPU unless the module itself does otherwise, so rank " +
         std::to_string(stage.gpu) + " needs more memory than the plan predicts";
}

// A profile name need not be valid UTF-8: replace what is not rather than throw.
std::string dump_scalar(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// An object on one line with ", " and ": " between its members (a stage).
std::string inline_text(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return dump_scalar(j);
  std::string out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    out += dump_scalar(nlohmann::ordered_json(it.key())) + ": " + inline_text(it.value());
  }
  return out + "}";
}

}  // namespace

TorchSchedule torch_schedule(const Plan& plan, int micro_batches) {
  if (micro_batches < 1)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "must be >= 1, got " + std::to_string(micro_batches));
  const Program program = lower(plan, micro_batches);
  TorchSchedule schedule;
  schedule.micro_batches = micro_batches;
  for (const schedule::Stage& stage : plan.stages) schedule.stage_to_rank.push_back(stage.gpu);
  schedule.actions.resize(program.per_gpu.size());
  for (std::size_t g = 0; g < program.per_gpu.size(); ++g)
    for (const Instr& instr : program.per_gpu[g])
      if (instr.kind == InstrKind::Forward || instr.kind == InstrKind::Backward ||
          instr.kind == InstrKind::BackwardWeight)
        schedule.actions[g].push_back(
            action_token(instr, plan.stages.at(instr.stage).splits_backward()));
  return schedule;
}

std::string torch_schedule_csv(const TorchSchedule& schedule) {
  std::string out;
  for (const std::vector<std::string>& rank : schedule.actions) {
    for (std::size_t i = 0; i < rank.size(); ++i) out += (i > 0 ? "," : "") + rank[i];
    out += '\n';
  }
  return out;
}

std::vector<std::string> torch_schedule_notes(const Plan& plan) {
  std::vector<std::string> notes;
  std::vector<bool> has_stage(plan.platform.gpus, false);
  for (const schedule::Stage& stage : plan.stages) {
    if (stage.gpu >= 0 && stage.gpu < plan.platform.gpus) has_stage[stage.gpu] = true;
    if (stage.uses_sequence()) notes.push_back(stage_note(stage));
  }
  for (int rank = 0; rank < plan.platform.gpus; ++rank)
    if (!has_stage[rank])
      notes.push_back("rank " + std::to_string(rank) +
                      " runs no stage, and torch.distributed.pipelining needs one on every rank "
                      "of its pipeline group: leave rank " +
                      std::to_string(rank) +
                      " out of the group and drop its empty line of the CSV (the ranks after it "
                      "move down by one)");
  if (plan.replicas > 1)
    notes.push_back("the plan runs " + std::to_string(plan.replicas) +
                    " data-parallel replicas of this pipeline: the schedule is one replica's; "
                    "average each stage's gradients across the replicas outside the schedule");
  return notes;
}

nlohmann::ordered_json torch_stages_json(const Plan& plan, const TorchSchedule& schedule) {
  using Json = nlohmann::ordered_json;
  Json j = Json::object();
  j["format"] = kTorchStagesFormat;
  j["profile"] = plan.profile;
  j["micro_batches"] = schedule.micro_batches;
  j["ranks"] = static_cast<int>(schedule.actions.size());
  j["num_stages"] = static_cast<int>(plan.stages.size());
  Json stages = Json::array();
  for (const schedule::Stage& stage : plan.stages) {
    Json s = Json::object();
    s["stage"] = stage.id;
    s["rank"] = stage.gpu;
    s["first_layer"] = stage.first_layer;
    s["last_layer"] = stage.last_layer;
    s["remat"] = name_of(schedule::kRematStrategyNames, stage.remat);
    s["offload"] = name_of(schedule::kOffloadStrategyNames, stage.offload);
    stages.push_back(std::move(s));
  }
  j["stages"] = std::move(stages);
  j["notes"] = torch_schedule_notes(plan);
  return j;
}

std::string torch_stages_text(const Plan& plan, const TorchSchedule& schedule) {
  const nlohmann::ordered_json j = torch_stages_json(plan, schedule);
  std::string out = "{\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += "  " + dump_scalar(nlohmann::ordered_json(it.key())) + ": ";
    const nlohmann::ordered_json& value = it.value();
    if (!value.is_array() || value.empty()) {
      out += inline_text(value);
      continue;
    }
    out += "[\n";
    for (std::size_t i = 0; i < value.size(); ++i)
      out += "    " + inline_text(value[i]) + (i + 1 < value.size() ? ",\n" : "\n");
    out += "  ]";
  }
  return out + "\n}\n";
}

}  // namespace madpipe::plan
