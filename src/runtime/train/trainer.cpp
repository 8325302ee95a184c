#include "runtime/train/trainer.hpp"

#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "core/units.hpp"
#include "plan/validate.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"
#include "runtime/comm/replicas.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/config/learning_rate.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/precision.hpp"
#include "runtime/model/saved_tensors.hpp"
#include "runtime/model/script_model.hpp"
#include "runtime/train/layer_checkpoint.hpp"
#include "runtime/train/layer_migration.hpp"
#include "runtime/train/loss_scaler.hpp"
#include "runtime/train/resume.hpp"
#include "runtime/train/sync_pipeline.hpp"
#include "runtime/train/train_planning.hpp"
#include "runtime/train/training_run.hpp"
#include "runtime/train/two_weight_training.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <mpi.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fs = std::filesystem;

namespace madpipe::runtime {
namespace {

// What a run has agreed on before it trains: its device, where it resumes, data and model
// (identical on every rank), the profile and the first plan.
struct Prepared {
  torch::Device device = torch::kCPU;
  ResumePoint resume;
  std::unique_ptr<DataSource> data;
  ChainModel model;
  Batch sample;  // micro-batch 0 on the device (in the compute dtype), for probing
  std::unique_ptr<MasterWeights> masters;  // --precision bf16, fp16: the fp32 weights that train
  double cpu_sharing = 1;                  // what the profile's times were scaled by
  Profile profile;
  plan::Plan first_plan;
};

void check_session(const TrainConfig& c, const MpiSession& session) {
  check_train_config(c);
  if (c.dry_run && session.size() != 1)
    throw Error(ErrorKind::InvalidInput, "", "dry-run",
                "a dry run is one process (no mpirun -np " + std::to_string(session.size()) + ")");
  if (!c.dry_run && session.size() != c.platform.gpus)
    throw Error(ErrorKind::InvalidInput, "", "gpus",
                "--gpus is " + std::to_string(c.platform.gpus) + " but " +
                    std::to_string(session.size()) +
                    " MPI processes run (start them with mpirun -np " +
                    std::to_string(c.platform.gpus) + ")");
}

torch::Device choose_device(const TrainConfig& c, const MpiSession& session, const Say& say) {
  torch::Device device = torch::kCPU;
  try {
    device = device_of(c.device, session.gpu_peers().rank, session.gpu_peers().size);
    make_current(device);  // before any CUDA context, stream or communicator is made
    if (device.is_cuda()) allow_tf32(c.tf32);
    // One autograd engine from the first backward on (offloading stages need its hooks): a
    // switch later would start device threads with library workspaces of their own.
    SavedTensorCollector::supported();
  } catch (const Error& e) {
    if (!c.dry_run || e.kind() != ErrorKind::Unsupported) throw;
    say(std::string("dry run: ") + e.what() +
        "; profiling on the CPU instead (its times are not the device's)");
  }
  return device;
}

// The plan of a resumed run, in `c`: the checkpoint's when the run trains where it did (the same
// GPUs, replicas, memory, planner) and no --plan is given; else --plan or a new plan, made from
// --profile or the run's measured profile.json: a checkpoint keyed by the model loads into any
// plan. One per stage (2BW's, or an older madpipe's) loads only into its own plan.
void choose_resumed_plan(TrainConfig& c, const ResumePoint& resume, const Say& say) {
  const std::vector<std::string> changes = check_resumed_settings(c.output_dir, resume.step, c);
  std::string changed;
  bool replans = false, regrouped = false;
  for (const std::string& change : changes) {
    changed += (changed.empty() ? "" : ", ") + change;
    replans = replans || change.rfind("device ", 0) != 0;  // a device alone keeps the plan
    regrouped = regrouped || change.rfind("gpus ", 0) == 0 || change.rfind("replicas ", 0) == 0;
  }
  if (!holds_layer_files(c.output_dir, resume.step)) {
    // Per stage: only the checkpoint's plan, on its GPUs and replicas, can load it.
    if (regrouped)
      throw Error(ErrorKind::InvalidInput, checkpoint_dir(c.output_dir, resume.step).string(), "",
                  "this checkpoint holds the stages of its plan (" +
                      std::string(c.mode == TrainingMode::TwoWeightVersions
                                      ? "--mode 2bw keeps its two weight versions per stage"
                                      : "written by an older madpipe") +
                      "): it resumes only where it was trained, but " + changed);
    if (c.plan.empty())
      c.plan = resume.plan_path;
    else
      check_resumed_plan(c.plan, resume.plan_path);
    return;
  }
  if (c.plan.empty() && !replans) {
    c.plan = resume.plan_path;
    if (!changed.empty()) say("resuming with the checkpoint's plan (" + changed + ")");
    return;
  }
  const fs::path measured = fs::path(c.output_dir) / "profile.json";
  if (c.plan.empty() && c.profile.empty() && fs::exists(measured)) c.profile = measured.string();
  say("resuming the checkpoint of step " + std::to_string(resume.step) + " on " +
      (c.plan.empty() ? "a new plan from " + (c.profile.empty() ? "a new profile" : c.profile)
                      : c.plan) +
      (changed.empty() ? "" : " (" + changed + ")") +
      ": each rank loads the layers its plan gives it");
}

// Device, resume point, data, model, profile and first plan. `c` takes the resumed run's plan
// (choose_resumed_plan).
Prepared prepare(TrainConfig& c, MpiSession& session, const Say& say) {
  const int rank = session.rank();
  Prepared p;
  p.device = choose_device(c, session, say);
  check_precision_runs(c.precision, p.device);
  // A resumed run continues with the plan it checkpointed, whatever a new profile would say.
  if (c.resume && !c.dry_run) {
    p.resume = find_resume_point(c.output_dir, rank, say);
    if (p.resume.step > 0) choose_resumed_plan(c, p.resume, say);
  }
  torch::set_num_threads(1);
  install_cpu_memory_counter();  // before the model, so that traces count its tensors
  // Data and model: identical on every rank (same seed). The model holds no layer until the
  // plan says which are this rank's: the profiler builds each layer for its measurement alone.
  Workload workload;
  session.run_on_every_rank([&] {
    workload = make_workload(c, c, c.replicas);
    p.model = take_model(workload);
    if (workload.model.kind == ModelKind::Script)
      check_script_chain(p.model, workload.data->micro_batch(0, 0, false), workload.model.script);
  });
  p.data = std::move(workload.data);
  const std::int64_t data_bytes = p.data->host_bytes();
  say("data: " + p.data->description() +
      (data_bytes > 0 ? "; " + format_bytes(static_cast<double>(data_bytes)) +
                            " in host memory on each rank, apart from the plan's memory (which "
                            "counts one micro-batch's data)"
                      : std::string()));
  if (!p.device.is_cpu()) say("devices: " + c.device + " (rank 0 on " + p.device.str() + ")");
  fs::create_directories(c.output_dir);
  if (c.precision != Precision::Fp32) compute_loss_in_fp32(p.model);
  p.sample = in_precision(on_device(p.data->micro_batch(0, 0, false), p.device), c.precision);
  p.profile = agree_on_profile(c, p.model, p.sample, p.device, rank, say, &p.cpu_sharing);
  p.first_plan = agree_on_plan(c, p.profile, rank, say);
  if (rank == 0) plan::write_plan(p.first_plan, (fs::path(c.output_dir) / "plan.json").string());
  say("plan: " + p.first_plan.algorithm + ", " + std::to_string(p.first_plan.stages.size()) +
      " stages on " + std::to_string(pipeline_ranks(c)) + " ranks" +
      (c.replicas > 1 ? " x " + std::to_string(c.replicas) + " data-parallel replicas" : "") +
      ", " + std::to_string(p.first_plan.pattern.k) + "-periodic, predicted " +
      format_ms(p.first_plan.predicted.period_ms) + " per micro-batch");
  say(stage_summary(p.first_plan, p.model));
  return p;
}

// Tied parameters train in synchronous runs without re-planning; the others refuse them.
void check_tied_parameters(const TrainConfig& c, const ChainModel& model, const Say& say) {
  if (model.tied_parameters.empty()) return;
  const std::vector<TiedUse>& group = model.tied_parameters.front();
  const std::string tie = model.names[group.front().layer] + "." + group.front().name + " and " +
                          model.names[group.back().layer] + "." + group.back().name;
  if (c.mode == TrainingMode::TwoWeightVersions)
    throw Error(
        ErrorKind::Unsupported, "", "mode",
        "2bw does not train tied parameters yet (" + tie + " are one tensor); use --mode sync");
  if (c.replan_after > 0)
    throw Error(ErrorKind::Unsupported, "", "replan-after",
                "re-planning does not move tied parameters yet (" + tie +
                    " are one tensor); leave --replan-after out");
  say("tied parameters: " + std::to_string(model.tied_parameters.size()) + " group(s), e.g. " +
      tie +
      "; trained as one tensor (gradients summed over the ranks "
      "that hold a copy)");
}

void say_replicas(const TrainConfig& c, const Say& say) {
  const int pipeline_size = pipeline_ranks(c);
  say("replicas: rank r is GPU r % " + std::to_string(pipeline_size) + " of replica r / " +
      std::to_string(pipeline_size) + "; each stage averages its gradients over the " +
      std::to_string(c.replicas) + " replicas at every step (" +
      std::to_string(c.replicas * c.micro_batches) + " micro-batches per step in all)");
  const int per_node = c.platform.gpus_per_node;
  if (per_node > 0 && pipeline_size % per_node != 0 && per_node % pipeline_size != 0)
    say("note: pipelines of " + std::to_string(pipeline_size) + " ranks straddle nodes of " +
        std::to_string(per_node) + " ranks differently, so every link is planned at the " +
        "slowest bandwidth; --replicas such that the pipeline ranks divide --gpus-per-node "
        "(or " +
        "are a multiple of it) keeps pipeline neighbours on one node");
}

// Synchronous training: each step runs the plan's program over the step's micro-batches (or,
// with --plain-loop, the unsplit model in one autograd loop), then every rank agrees on the
// step's health and the optimizers step; validation, the trace, re-planning and checkpoints
// follow at their steps.
class SyncSteps {
 public:
  SyncSteps(TrainingRun& run, Prepared& prepared, const ReplicaGroups& groups,
            const LayerOutputs& outputs);
  int train();

 private:
  // This rank's layers as a checkpoint keyed by the model holds them (what trains: the masters).
  std::vector<LayerState> layer_states() const;
  void load_checkpoint(int step);
  void save_checkpoint(int step) const;
  void start_trace();
  void finish_trace();
  StepLoss run_step(int step, int* bad_micro_batch);
  // Steps the optimizers, or skips the update (--on-nan skip); returns whether it skipped.
  bool update(int step, const StepHealth& health);
  void record(int step, const StepHealth& health, bool validated, bool skipped);
  void checkpoint_after(int step, const StepHealth& health);
  // fp16: whether the step's gradients overflowed (then the scale halves), counting a good step.
  bool skips_overflow(int step, const StepHealth& health);

  TrainingRun& run_;
  const TrainConfig& c_;
  Prepared& p_;
  const ReplicaGroups& groups_;
  const LayerOutputs& outputs_;
  const int first_micro_batch_;  // replica d runs micro-batches d*m .. d*m+m-1 of the step's
  std::unique_ptr<SyncPipeline> pipeline_;
  bool replanning_ = false;
  int first_measured_ = 1;
  int first_traced_ = 1;
  int last_traced_ = 0;
  MemoryMeter meter_;
  const std::int64_t tokens_per_sample_;  // token data: metrics.jsonl's tokens_per_s
  std::unique_ptr<TraceRecorder> recorder_;
  double last_val_ = -1;
  const MasterWeights* masters_;        // --precision bf16, fp16 (null: fp32)
  std::unique_ptr<LossScaler> scaler_;  // --precision fp16
  double step_loss_scale_ = 1;          // the scale the last step ran with (fp16)
};

SyncSteps::SyncSteps(TrainingRun& run, Prepared& prepared, const ReplicaGroups& groups,
                     const LayerOutputs& outputs)
    : run_(run),
      c_(run.config()),
      p_(prepared),
      groups_(groups),
      outputs_(outputs),
      first_micro_batch_(groups.layout().replica * run.config().micro_batches),
      meter_(prepared.device),
      tokens_per_sample_(tokens_per_sample(*prepared.data)),
      masters_(prepared.masters.get()) {
  if (c_.replicas > 1) say_replicas(c_, run_.sayer());
  if (masters_)
    run_.say(std::string("precision: ") + name_of(kPrecisionNames, c_.precision) +
             " weights and activations, fp32 master weights, gradients accumulated, reduced and "
             "clipped in fp32; " +
             weight_bytes_text(c_));
  if (c_.precision == Precision::Fp16) {
    scaler_ = std::make_unique<LossScaler>(
        c_.loss_scale.value_or(kDefaultLossScale),
        c_.loss_scale_growth_interval.value_or(kDefaultLossScaleGrowthInterval));
    scale_loss_gradient(p_.model, scaler_->shared_scale());
    prepared.masters->unscale_gradients_by(scaler_->shared_scale());
    run_.say(
        "loss scaling: from " + format_number(scaler_->scale()) +
        ", halved on each step whose gradients overflow (the step is skipped), doubled "
        "after " +
        std::to_string(c_.loss_scale_growth_interval.value_or(kDefaultLossScaleGrowthInterval)) +
        " steps without");
  }
  pipeline_ = build_sync_pipeline(c_, p_.first_plan, p_.model, outputs, groups, nullptr, masters_);
  if (p_.model.release_source) p_.model.release_source();  // this rank's layers are built
  if (c_.plain_loop)
    run_.say("plain loop: each step runs the unsplit model in one autograd loop, not the plan");
}

std::vector<LayerState> SyncSteps::layer_states() const {
  std::map<const void*, torch::optim::Optimizer*> stepped_by;
  for (const auto& optimizer : pipeline_->optimizers)
    for (const auto& group : optimizer->param_groups())
      for (const torch::Tensor& parameter : group.params())
        stepped_by.emplace(param_key(parameter), optimizer.get());
  std::vector<LayerState> states;
  for (const auto& [s, optimizer] : pipeline_->stage_optimizers) {
    const schedule::Stage& stage = pipeline_->plan.stages[static_cast<std::size_t>(s)];
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
      LayerState state;
      state.layer = l;
      state.parameter_keys = p_.model.parameter_keys(l, l);
      state.buffer_keys = p_.model.buffer_keys(l, l);
      for (const torch::Tensor& parameter : p_.model.parameters(l, l)) {
        const torch::Tensor trained = masters_ ? masters_->master_of(parameter) : parameter;
        const auto it = stepped_by.find(param_key(trained));
        state.parameters.push_back(trained);
        state.optimizers.push_back(it == stepped_by.end() ? nullptr : it->second);
      }
      state.buffers = p_.model.buffers(l, l);
      states.push_back(std::move(state));
    }
  }
  return states;
}

void SyncSteps::load_checkpoint(int step) {
  if (holds_layer_files(c_.output_dir, step)) {
    for (const LayerState& state : layer_states())
      load_layer(c_.output_dir, step, state, p_.device);
    return;
  }
  // A checkpoint per stage (an older madpipe's), of this very plan (choose_resumed_plan).
  for (const auto& [s, optimizer] : pipeline_->stage_optimizers)
    load_stage(c_.output_dir, step, s,
               StageState{pipeline_->trained_parameters(s), pipeline_->executor->stage_buffers(s),
                          optimizer},
               p_.device);
}

void SyncSteps::save_checkpoint(int step) const {
  if (groups_.layout().replica != 0) return;  // replicas hold the same weights: the first writes
  for (const LayerState& state : layer_states()) save_layer(c_.output_dir, step, state);
}

void SyncSteps::start_trace() {
  MPI_Barrier(MPI_COMM_WORLD);  // a common clock origin
  recorder_ = std::make_unique<TraceRecorder>(groups_.layout().position);
  recorder_->record_until_step(last_traced_);
  pipeline_->executor->trace_into(recorder_.get());
  meter_.reset_peak();
  pipeline_->executor->reset_memory_peak();
}

void SyncSteps::finish_trace() {
  recorder_->stop();
  run_.write_trace(pipeline_->plan, pipeline_->program, micro_batch_bytes(*p_.data), *recorder_,
                   meter_, *pipeline_->executor, last_traced_ - first_traced_ + 1,
                   groups_.pipeline());
  pipeline_->executor->trace_into(nullptr);
  recorder_.reset();
}

StepLoss SyncSteps::run_step(int step, int* bad_micro_batch) {
  for (auto& optimizer : pipeline_->optimizers) optimizer->zero_grad();
  if (pipeline_->averager && !c_.plain_loop)  // gradients as views of the all-reduce's buckets
    for (int s : pipeline_->executor->local_stages())
      pipeline_->averager->bind_gradients(s, pipeline_->trained_parameters(s));
  pipeline_->executor->on_loss([bad_micro_batch](int i, double value) {
    if (!std::isfinite(value)) *bad_micro_batch = std::min(*bad_micro_batch, i);
  });
  const std::uint64_t seed = c_.seed;
  const int first = first_micro_batch_;
  pipeline_->executor->seed_layers_by(
      [seed, step, first](int i) { return micro_batch_random_key(seed, step, first + i); });
  auto batch_of = [&](int i) {
    return in_precision(on_device(p_.data->micro_batch(step, first + i, false), p_.device),
                        c_.precision);
  };
  const StepLoss local =
      c_.plain_loop ? run_unsplit(
                          p_.model, c_.micro_batches, batch_of,
                          [seed, step](int i) { return micro_batch_random_key(seed, step, i); },
                          [this] {
                            if (masters_) masters_->fold_all_gradients();
                          })
                    : pipeline_->executor->run(pipeline_->program, batch_of);
  if (pipeline_->averager) pipeline_->averager->finish();
  if (pipeline_->tied) pipeline_->tied->sum();
  if (step == run_.first_step() && c_.receive_buffers == plan::ReceivePosting::Arena &&
      !c_.plain_loop)
    report_receive_arena(*pipeline_->executor, groups_.layout(), run_.sayer());
  if (step == run_.first_step())
    note_program_memory(c_, pipeline_->plan, pipeline_->program, micro_batch_bytes(*p_.data),
                        run_.sayer());
  return local;
}

bool SyncSteps::skips_overflow(int step, const StepHealth& health) {
  if (!scaler_ || !(health.problem.empty() || health.only_gradients)) return false;
  step_loss_scale_ = scaler_->scale();
  if (!scaler_->update(!health.problem.empty())) return false;
  run_.say("step " + std::to_string(step) + ": the gradients overflowed at loss scale " +
           format_number(step_loss_scale_) + "; update skipped, loss scale now " +
           format_number(scaler_->scale()));
  for (auto& optimizer : pipeline_->optimizers) optimizer->zero_grad();
  return true;
}

bool SyncSteps::update(int step, const StepHealth& health) {
  if (skips_overflow(step, health)) return true;
  const bool skipped = !health.problem.empty();
  if (skipped && c_.on_nan == OnNonFinite::Stop)
    throw Error(ErrorKind::Runtime, "", "on-nan",
                "step " + std::to_string(step) + ": " + health.problem +
                    "; stopping (--on-nan skip skips such steps instead)");
  if (skipped) {
    run_.say("step " + std::to_string(step) + ": " + health.problem +
             "; update skipped (--on-nan skip)");
    for (auto& optimizer : pipeline_->optimizers) optimizer->zero_grad();
  } else {
    if (c_.clip_grad_norm) clip_gradients(*pipeline_, health.grad_norm, *c_.clip_grad_norm);
    const double lr = learning_rate_at(c_, step);
    for (auto& optimizer : pipeline_->optimizers) {
      set_learning_rate(*optimizer, lr);
      optimizer->step();
    }
    if (masters_) masters_->copy_to_layers();
  }
  return skipped;
}

void SyncSteps::record(int step, const StepHealth& health, bool validated, bool skipped) {
  if (run_.rank() != 0) return;
  const double step_s = run_.lap();
  const int samples = c_.replicas * c_.micro_batches * c_.micro_batch_size;
  const double samples_per_s = step_s > 0 ? samples / step_s : 0.0;
  nlohmann::ordered_json line;
  const double lr = learning_rate_at(c_, step);
  line["step"] = step;
  line["loss"] = health.loss;
  if (validated) line["val_loss"] = last_val_;
  if (skipped) line["skipped"] = true;
  line["lr"] = lr;
  line["grad_norm"] = health.grad_norm;
  if (scaler_) {
    line["loss_scale"] = step_loss_scale_;
    line["skipped_steps"] = scaler_->skipped_steps();  // overflows since the run's first step
  }
  line["step_s"] = step_s;
  line["samples_per_s"] = samples_per_s;
  if (tokens_per_sample_ > 0) line["tokens_per_s"] = samples_per_s * tokens_per_sample_;
  if (health.peak_bytes > 0) line["peak_memory_bytes"] = health.peak_bytes;
  line["seconds"] = run_.seconds();
  run_.append_metrics(line);
  if (validated || run_.prints_progress(step)) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "step %d/%d  loss %.4f%s  lr %.3g  grad_norm %.3g%s  %.1f samples/s  eta %s",
                  step, c_.steps, health.loss,
                  validated ? ("  val " + std::to_string(last_val_).substr(0, 6)).c_str() : "", lr,
                  health.grad_norm,
                  scaler_ ? ("  loss_scale " + format_number(step_loss_scale_)).c_str() : "",
                  run_.samples_per_s(step, samples), run_.eta(step).c_str());
    run_.say(buf);
  }
}

void SyncSteps::checkpoint_after(int step, const StepHealth& health) {
  // A resumed run must find the new plan's stages on disk after a switch.
  const bool switched = replanning_ && step == c_.replan_after &&
                        replan(c_, p_.profile, p_.cpu_sharing, step, first_measured_, pipeline_,
                               p_.model, outputs_, groups_, run_.rank(), run_.sayer());
  if (switched || run_.checkpoints_after(step) || health.stop_signal != 0)
    // Replicas hold the same weights: the first one writes them.
    run_.checkpoint(
        step, pipeline_->plan, [this](int at) { save_checkpoint(at); },
        scaler_ ? scaler_->state() : nlohmann::json());
}

int SyncSteps::train() {
  const int first_step = run_.start(p_.resume, [this](int step) { load_checkpoint(step); });
  if (masters_) masters_->copy_to_layers();  // a checkpoint's weights were loaded into them
  if (scaler_ && p_.resume.step > 0)
    scaler_->restore(p_.resume.state,
                     (checkpoint_dir(c_.output_dir, p_.resume.step) / "run.json").string());
  replanning_ = c_.replan_after >= first_step && c_.replan_after < c_.steps;
  if (c_.replan_after > 0 && !replanning_)
    run_.say("no re-planning: the run resumes after step " + std::to_string(c_.replan_after));
  // The first step warms up (allocations, caches): it is left out of the measurements.
  first_measured_ = replanning_ && c_.replan_after > first_step ? first_step + 1 : first_step;
  // With re-planning, the trace records the steps after it: the plan the run continues with.
  first_traced_ = replanning_ ? c_.replan_after + 1 : first_step;
  // The plain loop runs no program: nothing to trace.
  last_traced_ = c_.plain_loop ? 0 : std::min(c_.steps, first_traced_ + c_.trace_steps - 1);
  run_.start_clock();
  for (int step = first_step; step <= c_.steps; ++step) {
    if (step == first_traced_ && last_traced_ >= first_traced_) start_trace();
    if (recorder_) recorder_->begin_step(step);
    if (step == first_measured_) pipeline_->executor->reset_stage_times();
    int bad_micro_batch = INT_MAX;
    const StepLoss local = run_step(step, &bad_micro_batch);
    // Every rank learns of a non-finite loss or gradient, of a request to stop, the global
    // gradient norm and the step's loss (replicas hold equal gradients: the first one counts).
    const StepHealth health = agree_on_health(*pipeline_, bad_micro_batch, local,
                                              pipeline_->executor->memory_peak().bytes,
                                              groups_.layout().replica == 0, c_.transfer_timeout);
    const bool skipped = update(step, health);
    const bool validate = run_.validates_after(step);
    if (validate)
      last_val_ = mean_over_ranks(pipeline_->executor->evaluate(
                                      pipeline_->eval_program,
                                      [&](int i) {  // the same validation set every time
                                        return in_precision(
                                            on_device(p_.data->micro_batch(0, i, true), p_.device),
                                            c_.precision);
                                      }),
                                  c_.transfer_timeout);
    record(step, health, validate, skipped);
    if (recorder_ && step == last_traced_) finish_trace();
    checkpoint_after(step, health);
    if (run_.stops_after(health.stop_signal, step)) return kExitStoppedResumable;
  }
  run_.say_done("plan, profile, metrics and checkpoints in " + c_.output_dir);
  return 0;
}

}  // namespace
}  // namespace madpipe::runtime

int madpipe::runtime::train(const TrainConfig& config, int* argc, char*** argv) {
  TrainConfig c = config;
  MpiSession session(argc, argv);
  const int rank = session.rank();
  auto say = [&](const std::string& line) {
    if (rank == 0 && !c.quiet) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  try {
    check_session(c, session);
    Prepared p = prepare(c, session, say);
    if (c.dry_run) {
      say("dry run: profile and plan in " + c.output_dir + "; nothing trained");
      return 0;
    }
    if (rank == 0 && c.eval_every > 0) write_validation_set(c, *p.data);
    const int position = replica_layout(rank, session.size(), c.replicas).position;
    const LayerFilter mine = layers_of_rank(p.first_plan, position);
    for (int l = 0; l < p.model.size(); ++l)
      if (mine(l)) p.model.materialize(l, p.device);
    if (c.precision != Precision::Fp32)  // fp32 copies first, then the layers in bf16 or fp16
      p.masters = std::make_unique<MasterWeights>(p.model, compute_dtype(c.precision));
    const LayerOutputs outputs = probe_layer_outputs(p.model, p.sample, compute_dtype(c.precision));
    p.sample = Batch{};  // not held through the run, whose memory the plan accounts for
    check_tied_parameters(c, p.model, say);
    ReplicaGroups groups(replica_layout(rank, session.size(), c.replicas));
    const bool emulated = nccl::emulation_requested() && !p.device.is_cuda();
    const TransportKind transport = resolve_transport(
        c.transport, c.device, p.device, session.gpu_peers().size, nccl_built(), emulated);
    if (transport == TransportKind::Nccl)
      groups.set_nccl(make_nccl_communicators(groups.pipeline(), groups.replicas(), p.device,
                                              c.transfer_timeout));
    say(std::string("transport: ") + (transport == TransportKind::Mpi ? "mpi"
                                      : emulated ? "nccl (emulated over MPI on CPU ranks)"
                                                 : "nccl (GPU to GPU)"));
    if (c.mode == TrainingMode::TwoWeightVersions) {
      std::unique_ptr<Transport> link = make_transport(c, p.first_plan, groups);
      PipelineExecutor executor(p.model, p.first_plan, rank, *link, outputs);
      TrainingRun run(c, rank, p.first_plan.stages.back().gpu == rank, say);
      return train_two_weight_versions(run, p.first_plan, p.model, outputs, executor, *p.data,
                                       p.resume);
    }
    TrainingRun run(c, rank, rank == 0, say);
    return SyncSteps(run, p, groups, outputs).train();
  } catch (const std::exception& e) {
    session.abort(e.what(), exit_code_of(e));
  }
}
