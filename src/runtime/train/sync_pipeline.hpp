#pragma once

#include "core/profile.hpp"
#include "partition/replan.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "runtime/comm/replicas.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/train/master_weights.hpp"
#include "runtime/train/optimizer.hpp"
#include "runtime/train/tied_gradients.hpp"
#include "runtime/train/train_planning.hpp"
#include "runtime/train/trainer.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// What synchronous training builds from a plan; rebuilt when re-planning switches plans.
struct SyncPipeline {
  plan::Plan plan;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<PipelineExecutor> executor;
  plan::Program program, eval_program;
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  std::vector<std::pair<int, torch::optim::Optimizer*>> stage_optimizers;  // null: no parameters
  // Data parallelism: a stage's gradients are averaged over its replicas once its last backward
  // of the step is done.
  std::unique_ptr<GradientAverager> averager;
  // Tied parameters on several ranks: their gradients summed after the averaging (null: none).
  std::unique_ptr<TiedGradients> tied;
  // --precision bf16: the fp32 weights that train (null: the layers' own weights train).
  const MasterWeights* masters = nullptr;

  // What trains of a local stage: the masters of its parameters, or its parameters.
  std::vector<torch::Tensor> trained_parameters(int stage) const;
};

// This rank's transport for `plan`: NCCL over groups.nccl() when it is set (collective over the
// pipeline: the plan's channels are added), else MPI over groups.pipeline().
std::unique_ptr<Transport> make_transport(const OutputSettings& c, const plan::Plan& plan,
                                          const ReplicaGroups& groups);

// How the trainer lowers a plan: --receive-buffers and --receive-lookahead, receive buffers sized
// for the model's stage outputs; a validation program (train = false) runs forwards only.
plan::LowerOptions lower_options(const OutputSettings& c, const plan::Plan& plan,
                                 const LayerOutputs& outputs, int micro_batches, bool train);

// Lowers and dry-runs: throws Error{Internal} when the program of the plan would deadlock.
plan::Program lower_checked(const plan::Plan& plan, const plan::LowerOptions& options);

// Collective: each pipeline rank's receive arena after a step, printed by rank 0.
void report_receive_arena(const PipelineExecutor& executor, const ReplicaLayout& layout,
                          const Say& say);

// Lowers the plan, builds this rank's executor (on the replica's pipeline communicator), its
// optimizers and, with replicas, the gradient averaging. `states`: optimizer state to restore
// into the new optimizers, by parameter (null: fresh). `masters`: bf16 training's fp32 weights,
// which the optimizers step (null: fp32).
std::unique_ptr<SyncPipeline> build_sync_pipeline(const TrainConfig& c, const plan::Plan& plan,
                                                  ChainModel& model, const LayerOutputs& outputs,
                                                  const ReplicaGroups& groups,
                                                  const ParamStates* states,
                                                  const MasterWeights* masters = nullptr);

// Collective: the mean compute time of every stage since the executors' last reset, times
// `time_scale` (agree_on_profile's cpu_sharing: what the profile's times were scaled by).
std::vector<partition::MeasuredStage> measured_stages(PipelineExecutor& executor,
                                                      double time_scale = 1);

// --replan-after (collective): re-plans on the measured stage times, scaled by `time_scale` as the
// profile was (rank 0 decides) and, when the decision is to switch, moves layers and optimizer
// state between the ranks of each replica and rebuilds the pipeline. Returns true when it
// switched.
bool replan(const TrainConfig& c, const Profile& profile, double time_scale, int step,
            int first_measured, std::unique_ptr<SyncPipeline>& pipeline, ChainModel& model,
            const LayerOutputs& outputs, const ReplicaGroups& groups, int rank, const Say& say);

// What every rank must know after a step's forwards and backwards: a NaN or Inf loss (the
// first such micro-batch) or gradient (the first such stage), a request to stop, the step's
// global gradient norm and its mean loss.
struct StepHealth {
  std::string problem;  // empty: all finite
  // The problem is a gradient's while every loss is finite: under fp16 loss scaling, an overflow
  // that the scaler answers by skipping the step.
  bool only_gradients = false;
  int stop_signal = 0;
  double grad_norm = 0;         // over every parameter of the model, each counted once
  double loss = 0;              // mean over the step's micro-batches (all replicas)
  std::int64_t peak_bytes = 0;  // the most any rank's tensors have held so far (0: not counted)
};

// Collective, one reduction of a few numbers: every rank learns of a NaN or Inf loss
// (`bad_micro_batch`, INT_MAX: none) or gradient on any rank, of a request to stop, the global
// gradient norm, the mean of the ranks' `loss` and the largest of their `peak_bytes`. The norm
// counts each tied group at its first rank and, with replicas (whose averaged gradients are equal),
// only the ranks where `counts_norm`. Waits at most `timeout_s` (> 0) for the device's compute (the
// receives it waits for) and for the other ranks.
StepHealth agree_on_health(const SyncPipeline& pipeline, int bad_micro_batch, const StepLoss& loss,
                           std::int64_t peak_bytes, bool counts_norm, double timeout_s);

// Scales this rank's gradients by max_norm / (grad_norm + 1e-6) when that is below 1, as
// torch.nn.utils.clip_grad_norm_ does with the global norm (every rank scales its parameters,
// tied copies included, by the same factor).
void clip_gradients(const SyncPipeline& pipeline, double grad_norm, double max_norm);

}  // namespace madpipe::runtime
