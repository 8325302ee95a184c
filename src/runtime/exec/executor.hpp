#pragma once

#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/op_timer.hpp"
#include "runtime/device/trace_recorder.hpp"
#include "runtime/exec/stage_sequence.hpp"
#include "runtime/exec/stage_state.hpp"
#include "runtime/model/layer_seed.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weight_gradients.hpp"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// What crosses each layer boundary: the shape and type of every layer's output for one
// micro-batch. Stage boundaries of any plan are layer boundaries.
struct LayerOutputs {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<torch::Dtype> dtypes;
  torch::Device device = torch::kCPU;  // where the model runs: receive buffers go there
};
// The shapes at every layer boundary for a sample micro-batch: one forward without autograd,
// layer by layer, through the held layers (their buffers restored afterwards) and through each
// other layer built for its forward alone and dropped after it. The model may hold any subset of
// its layers; besides them, one layer's weights are alive at a time. The layers built for it
// compute in `borrowed_dtype` (the held ones in theirs).
LayerOutputs probe_layer_outputs(ChainModel& model, const Batch& sample,
                                 torch::Dtype borrowed_dtype = torch::kFloat);

// Compute time a rank spent in the forwards and backwards of one stage (transfers excluded; on
// the CPU the thread's CPU time, as madpipe train's own profile measures ops).
struct StageTime {
  double forward_ms = 0;
  double backward_ms = 0;  // a split stage's B and W together
  int forwards = 0;
  int backwards = 0;
};

struct StepLoss {
  double sum = 0;  // sum over the micro-batches whose loss this rank computed (last stage)
  int count = 0;
};

// Bytes of each stage's output message for one micro-batch (its gradient has the same size):
// what lowering needs to place receive buffers (plan::LowerOptions::message_bytes).
std::vector<std::int64_t> stage_message_bytes(const plan::Plan& plan, const LayerOutputs& outputs);

// Runs the instructions of one rank (one GPU) of a lowered program (plan/program.hpp), each as it
// says and nothing else: forwards and backwards of its stages, local hand-overs, sends, receives
// posted into the buffers the program assigns, optimizer steps. Gradients accumulate in the
// parameters; a program without optimizer steps leaves the step to the caller. The plan only
// says which layers form a stage.
// A stage with an operation sequence (Stage::sequence: rematerialization and offloading) runs it
// in training: its forward part (up to Loss) at the stage's F of a micro-batch, the rest at its B,
// keeping in between what the forward part stored (stage_sequence.hpp); validation runs plain
// forwards.
// A stage that splits its backward (Stage::splits_backward) forwards with its deferrable layers
// (weight_gradients.hpp) leaving their weight gradients to W: its B computes the input gradient
// and the weight gradients of the other layers, its W the deferred ones. The stage's backward of
// a micro-batch counts as done (after_backward, on_backward) at its W.
class PipelineExecutor {
 public:
  // Throws Error{InvalidInput} when the plan does not fit the model or a stage's sequence (any
  // stage's, so that every rank fails alike) is malformed or cannot run.
  PipelineExecutor(ChainModel& model, const plan::Plan& plan, int rank, Transport& transport,
                   const Batch& sample);
  // The same with the boundary shapes known: the model may hold only this rank's layers.
  PipelineExecutor(ChainModel& model, const plan::Plan& plan, int rank, Transport& transport,
                   const LayerOutputs& outputs);

  // Runs a training program (Program::train). `batch_of(i)` gives micro-batch i; each loss is
  // divided by the micro-batches of one update (the program's, or all of them) so that
  // accumulated gradients equal those of the whole batch. Throws Error{Internal} when the program
  // contradicts itself (data used before it is delivered, a slot or buffer still in use).
  StepLoss run(const plan::Program& program, const std::function<Batch(int)>& batch_of);

  // Runs a validation program (forwards only, lowered with LowerOptions::train = false) with the
  // local stages in evaluation mode (batch norm uses and keeps its running statistics; dropout is
  // off) and no autograd; each layer's mode is restored afterwards.
  StepLoss evaluate(const plan::Program& program, const std::function<Batch(int)>& batch_of);

  std::vector<int> local_stages() const;
  // stage_message_bytes of the plan and the model.
  const std::vector<std::int64_t>& message_bytes() const noexcept { return message_bytes_; }
  const torch::Device& device() const noexcept { return device_; }
  std::vector<torch::Tensor> stage_parameters(int stage, int copy = 0) const;
  std::vector<torch::Tensor> stage_buffers(int stage, int copy = 0) const;
  // A stage's tensors for a checkpoint: its weights (of `copy`), buffers, their state_dict keys,
  // and `optimizer`.
  StageState stage_state(int stage, torch::optim::Optimizer* optimizer, int copy = 0) const;

  // Asynchronous training with two weight versions (2BW): micro-batch i runs its forward and its
  // backward on stage s with weight copy copy_of(s, i) (0: the constructor's model, 1: `second`;
  // called once, at the forward), and after_backward(stage, i) runs when the backward of
  // micro-batch i on a local stage is done. Programs then need their optimizer steps.
  // on_loss(i, loss) reports each micro-batch's loss.
  void use_two_weight_copies(ChainModel& second, std::function<int(int, int)> copy_of,
                             std::function<void(int, int)> after_backward);
  // What an OptimizerStep instruction does: step(stage, update).
  void on_optimizer_step(std::function<void(int, int)> step) { optimizer_step_ = std::move(step); }
  void on_loss(std::function<void(int, double)> callback) { on_loss_ = std::move(callback); }
  // Training runs seed the generators before each layer's forward of micro-batch i from
  // key_of(i) (layer_seed.hpp), so random masks do not depend on the split; null: not seeded.
  void seed_layers_by(RandomKeyOf key_of) { random_key_ = std::move(key_of); }
  // on_backward(stage, i) runs when the backward of micro-batch i on a local stage is done (the
  // trainer starts a stage's gradient all-reduce after its last one).
  void on_backward(std::function<void(int, int)> callback) { on_backward_ = std::move(callback); }

  // What the receive buffers of the last training run used.
  // Receive buffers come from the program: posted where it posts them, at the offsets it
  // planned in one arena (or each in its own allocation).
  struct ArenaUse {
    std::int64_t planned_bytes = 0;     // the arena (0 when the offsets were not planned)
    std::int64_t high_water_bytes = 0;  // highest end of a buffer in use
    std::int64_t peak_live_bytes = 0;   // most bytes in use at once
    std::int64_t sum_bytes = 0;         // every buffer of the step
    int buffers = 0;
  };
  const ArenaUse& arena_use() const noexcept { return arena_use_; }

  // The most bytes this rank's tensors held during one instruction of the training runs since
  // construction or reset_memory_peak() (MemoryMeter: counted on the CPU, the CUDA allocator's
  // statistics on a GPU; 0 when nothing counts), and that instruction ("B 1.3").
  struct MemoryPeak {
    std::int64_t bytes = 0;
    std::string at;
  };
  const MemoryPeak& memory_peak() const noexcept { return memory_peak_; }
  void reset_memory_peak() { memory_peak_ = MemoryPeak{}; }

  // Training runs record their forwards, backwards and transfers into `recorder` (null: none).
  void trace_into(TraceRecorder* recorder) { recorder_ = recorder; }

  // Compute time of each stage (indexed by stage; zero for other ranks' stages) summed over the
  // training runs since the last reset. On a GPU a run's op times are read when the next run
  // starts or when asked for here (which waits for the device to finish the last run), so that a
  // run returns while its last kernels still execute and the caller's optimizer step queues behind
  // them.
  const std::vector<StageTime>& stage_times();
  void reset_stage_times();

 private:
  // One run of a program: the state its instructions share, a handler per instruction kind
  // (program_run.cpp).
  class Run;
  StepLoss execute(const plan::Program& program, const std::function<Batch(int)>& batch_of,
                   bool train);
  // The stage's layers on `input` with weight copy `copy`; with `defer_into`, the layers that can
  // leave their weight gradients to W do so (weight_gradients.hpp).
  // `random_key`: the micro-batch's key for seed_layer_forward (none: not seeded).
  torch::Tensor forward_stage(int stage, torch::Tensor input, int copy,
                              const c10::intrusive_ptr<DeferredWeightGradients>& defer_into,
                              std::optional<std::uint64_t> random_key);
  ChainModel& model_of(int copy) { return copy == 1 && second_ ? *second_ : model_; }
  torch::Tensor receive_buffer(const plan::Instr& instr, const plan::ReceiveBuffer& buffer);
  // Adds the op times of the last training run (if not yet added) to stage_times_, and its ops to
  // `trace` when not null.
  void settle_stage_times(TraceRecorder* trace = nullptr);

  ChainModel& model_;
  ChainModel* second_ = nullptr;
  std::function<int(int, int)> copy_of_;
  std::function<void(int, int)> after_backward_;
  std::function<void(int, double)> on_loss_;
  std::function<void(int, int)> on_backward_;
  std::function<void(int, int)> optimizer_step_;
  RandomKeyOf random_key_;
  TraceRecorder* recorder_ = nullptr;
  const plan::Plan& plan_;
  int rank_;
  Transport& transport_;
  std::vector<std::vector<std::int64_t>> output_shapes_;  // per stage
  std::vector<torch::Dtype> output_dtypes_;
  std::vector<std::int64_t> message_bytes_;  // per stage
  torch::Device device_ = torch::kCPU;
  std::vector<std::unique_ptr<StageSequence>> sequences_;  // per stage; null: plain F and B
  std::vector<StageTime> stage_times_;
  std::unique_ptr<OpTimer> timer_;
  // The forwards, backwards and W ops of the last training run, in the order timer_ timed them,
  // until settle_stage_times() reads their times.
  struct TimedOp {
    plan::TraceOpKind kind;
    int stage, micro_batch;
    double cpu_ms;  // the thread's CPU time on the CPU (what the profile measures), else unused
  };
  std::vector<TimedOp> unsettled_ops_;
  torch::Tensor arena_;  // bytes on device_
  ArenaUse arena_use_;
  MemoryPeak memory_peak_;
};

// Single-process reference: the unsplit model over the same micro-batches, gradients accumulated
// the same way, in a plain autograd loop (no program, no executor). With `key_of`, each layer's
// forward is seeded as PipelineExecutor::seed_layers_by does. `after_backward` runs after each
// micro-batch's backward (as on_backward after a stage's).
StepLoss run_unsplit(ChainModel& model, int micro_batches,
                     const std::function<Batch(int)>& batch_of, const RandomKeyOf& key_of = {},
                     const std::function<void()>& after_backward = {});

}  // namespace madpipe::runtime
