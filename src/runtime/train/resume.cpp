#include "runtime/train/resume.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "plan/plan.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/layer_checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {
// Rank 0 reads the plan of a checkpoint and every rank gets it; empty text when unreadable.
std::string shared_plan_text(const std::string& path, int rank) {
  std::string text;
  if (rank == 0) {
    try {
      std::ostringstream out;
      madpipe::plan::write_plan(madpipe::plan::read_plan(path), out);
      text = out.str();
    } catch (const std::exception&) {
      text.clear();
    }
  }
  return madpipe::runtime::broadcast_string(text, 0);
}

// run.json's "state" of a checkpoint, read by rank 0, on every rank (null: none recorded).
nlohmann::json saved_state(const std::string& output_dir, int step, int rank) {
  std::string text;
  if (rank == 0) {
    const fs::path path = madpipe::runtime::checkpoint_dir(output_dir, step) / "run.json";
    std::ifstream in(path);
    const nlohmann::json record =
        in ? nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
    if (record.is_object() && record.contains("state")) text = record["state"].dump();
  }
  text = madpipe::runtime::broadcast_string(text, 0);
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

// The first problem of the files of a checkpoint this rank verifies: in a checkpoint keyed by
// the model, the layers l with l % ranks == rank (whatever plan wrote them); in one per stage, the
// stages `plan` places on this rank.
std::string first_problem(const std::string& output_dir, int step, const madpipe::plan::Plan& plan,
                          int rank, int ranks) {
  if (madpipe::runtime::holds_layer_files(output_dir, step)) {
    const int layers = plan.stages.back().last_layer + 1;
    for (int l = rank; l < layers; l += ranks) {
      std::string problem = madpipe::runtime::verify_layer(output_dir, step, l);
      if (!problem.empty()) return problem;
    }
    return "";
  }
  for (const auto& stage : plan.stages)
    if (stage.gpu == rank) {
      std::string problem = madpipe::runtime::verify_stage(output_dir, step, stage.id);
      if (!problem.empty()) return problem;
    }
  return "";
}
}  // namespace

madpipe::runtime::ResumePoint madpipe::runtime::find_resume_point(
    const std::string& output_dir, int rank, const std::function<void(const std::string&)>& say) {
  std::vector<int> candidates;
  if (rank == 0) candidates = complete_checkpoints(output_dir);
  std::string list = broadcast_string(join_steps(candidates), 0);
  candidates.clear();
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) candidates.push_back(std::stoi(item));

  std::vector<int> damaged;
  for (int step : candidates) {
    fs::path plan_path = checkpoint_plan_path(output_dir, step);
    if (!fs::exists(plan_path)) plan_path = fs::path(output_dir) / "plan.json";  // older layout
    const std::string text = shared_plan_text(plan_path.string(), rank);
    std::string problem = text.empty() ? plan_path.string() + ": missing or unreadable plan" : "";
    if (problem.empty()) {
      const plan::Plan plan = plan::plan_from_json(nlohmann::json::parse(text), plan_path.string());
      int ranks = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &ranks);
      problem = first_problem(output_dir, step, plan, rank, ranks);
    }
    // Every rank's verdict; the first problem is printed by the rank that found it.
    int whole = problem.empty() ? 1 : 0, all_whole = 0;
    MPI_Allreduce(&whole, &all_whole, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!problem.empty())
      std::fprintf(stderr, "rank %d: checkpoint of step %d is not usable: %s\n", rank, step,
                   problem.c_str());
    if (all_whole) {
      if (!damaged.empty())
        say("checkpoints of step " + join_steps(damaged) + " are damaged; resuming from step " +
            std::to_string(step));
      return {step, plan_path.string(), saved_state(output_dir, step, rank)};
    }
    damaged.push_back(step);
  }
  if (!damaged.empty())
    throw Error(ErrorKind::Io, (fs::path(output_dir) / "checkpoints").string(), "",
                "no whole checkpoint to resume from (damaged: step " + join_steps(damaged) + ")");
  return {};
}

void madpipe::runtime::truncate_metrics(const std::string& path, int step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int>() <= step)
      kept += line + "\n";
  }
  write_file_atomically(path, kept);
}

std::string madpipe::runtime::run_record(const TrainConfig& c, int step,
                                         const nlohmann::json& state) {
  nlohmann::ordered_json j;
  j["format"] = "madpipe.run/1";
  j["step"] = step;
  j["next_step"] = step + 1;
  j["model"] = {{"model", name_of(kModelKindNames, c.model)},
                {"layers", c.layers},
                {"width", c.width},
                {"heads", c.heads},
                {"context", c.context},
                {"inputs", c.inputs},
                {"outputs", c.outputs},
                {"image", c.image},
                {"vocab", c.vocab},
                {"script", c.script},
                {"loss", c.loss ? name_of(kLossNames, *c.loss) : ""}};
  j["training"] = {
      {"data", c.data},
      {"data_format", name_of(kDataFormatNames, c.data_format)},
      {"validation_data", c.validation_data},
      {"mode", name_of(kTrainingModeNames, c.mode)},
      {"steps", c.steps},
      {"micro_batches", c.micro_batches},
      {"micro_batch_size", c.micro_batch_size},
      {"optimizer", name_of(kOptimizerNames, c.optimizer)},
      {"precision", name_of(kPrecisionNames, c.precision)},
      {"learning_rate", c.learning_rate},
      {"lr_schedule", name_of(kLrScheduleNames, c.lr_schedule)},
      {"warmup_steps", c.warmup_steps},
      {"min_lr", c.min_lr ? nlohmann::json(*c.min_lr) : nlohmann::json()},
      {"momentum", c.momentum},
      {"weight_decay", c.weight_decay},
      {"clip_grad_norm", c.clip_grad_norm ? nlohmann::json(*c.clip_grad_norm) : nlohmann::json()},
      {"loss_scale", c.loss_scale ? nlohmann::json(*c.loss_scale) : nlohmann::json()},
      {"loss_scale_growth_interval", c.loss_scale_growth_interval
                                         ? nlohmann::json(*c.loss_scale_growth_interval)
                                         : nlohmann::json()},
      {"seed", c.seed}};
  j["platform"] = {
      {"gpus", c.platform.gpus},
      {"replicas", c.replicas},
      {"device", c.device},
      {"memory_bytes", c.platform.memory_bytes},
      {"bandwidth_bytes_per_ms", c.platform.bandwidth_bytes_per_ms},
      {"weight_copies", c.platform.weight_copies},
      {"gpus_per_node", c.platform.gpus_per_node},
      {"inter_node_bandwidth_bytes_per_ms", c.platform.inter_node_bandwidth_bytes_per_ms},
      {"algorithm", partition::to_string(c.planner.algorithm)}};
  if (!state.is_null()) j["state"] = state;
  return j.dump(1) + "\n";
}

std::vector<std::string> madpipe::runtime::check_resumed_settings(const std::string& output_dir,
                                                                  int step,
                                                                  const TrainConfig& config) {
  const fs::path path = checkpoint_dir(output_dir, step) / "run.json";
  std::ifstream in(path);
  if (!in) return {};
  nlohmann::json saved;
  try {
    saved = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::InvalidInput, path.string(), "", std::string("not JSON: ") + e.what());
  }
  const nlohmann::json now = nlohmann::json::parse(run_record(config, step));
  // The first step's loss scale no longer matters: the checkpoint's scaler state continues. The
  // micro-batches per replica may change with the replicas (below).
  const std::set<std::string> may_change = {"steps", "learning_rate", "min_lr", "loss_scale",
                                            "micro_batches"};
  for (const char* part : {"model", "training"}) {
    if (!saved.contains(part)) continue;
    for (const auto& [key, value] : saved[part].items()) {
      if (may_change.count(key) || !now[part].contains(key)) continue;
      if (now[part][key] != value)
        throw Error(ErrorKind::InvalidInput, path.string(), std::string(part) + "." + key,
                    "the checkpoint's run has " + value.dump() + ", this run " +
                        now[part][key].dump() +
                        "; --resume continues the same run (change it back, or start a new run "
                        "in another --output-dir)");
    }
  }
  // Where the run trains may change (GPUs, replicas, device, memory, planner), not what a step
  // is: its micro-batches in all.
  const nlohmann::json platform = saved.value("platform", nlohmann::json::object());
  const int saved_replicas = platform.value("replicas", 1);
  const nlohmann::json training = saved.value("training", nlohmann::json::object());
  if (training.contains("micro_batches") && training["micro_batches"].is_number_integer()) {
    const int per_replica = training["micro_batches"].get<int>();
    if (per_replica * saved_replicas != config.micro_batches * config.replicas)
      throw Error(ErrorKind::InvalidInput, path.string(), "training.micro_batches",
                  "the checkpoint's run has " + std::to_string(per_replica) +
                      " micro-batches per replica x " + std::to_string(saved_replicas) +
                      " replicas = " + std::to_string(per_replica * saved_replicas) +
                      " per step, this run " + std::to_string(config.micro_batches) + " x " +
                      std::to_string(config.replicas) + " = " +
                      std::to_string(config.micro_batches * config.replicas) +
                      "; a resumed run keeps the micro-batches of a step (--micro-batches x "
                      "--replicas)");
  }
  std::vector<std::string> changes;
  for (const auto& [key, value] : platform.items())
    // The weight copies follow the precision and optimizer, which are compared above (older runs
    // recorded 4 whatever the optimizer).
    if (key != "weight_copies" && now["platform"].contains(key) && now["platform"][key] != value)
      changes.push_back(key + " " + value.dump() + " -> " + now["platform"][key].dump());
  return changes;
}

void madpipe::runtime::check_resumed_plan(const std::string& given_path,
                                          const std::string& checkpoint_plan_path) {
  const plan::Plan given = plan::read_plan(given_path);
  const plan::Plan saved = plan::read_plan(checkpoint_plan_path);
  const std::size_t stages = std::max(given.stages.size(), saved.stages.size());
  for (std::size_t s = 0; s < stages; ++s) {
    const bool both = s < given.stages.size() && s < saved.stages.size();
    if (both && given.stages[s].first_layer == saved.stages[s].first_layer &&
        given.stages[s].last_layer == saved.stages[s].last_layer &&
        given.stages[s].gpu == saved.stages[s].gpu)
      continue;
    auto describe = [s](const plan::Plan& plan) {
      if (s >= plan.stages.size()) return std::string("no stage ") + std::to_string(s);
      const schedule::Stage& stage = plan.stages[s];
      return "layers " + std::to_string(stage.first_layer) + "-" +
             std::to_string(stage.last_layer) + " on GPU " + std::to_string(stage.gpu);
    };
    throw Error(ErrorKind::InvalidInput, given_path, "/stages/" + std::to_string(s),
                "stage " + std::to_string(s) + " has " + describe(given) +
                    ", but the checkpoint's plan " + checkpoint_plan_path + " has " +
                    describe(saved) +
                    "; checkpoints hold the stages of their plan: resume without --plan");
  }
}
