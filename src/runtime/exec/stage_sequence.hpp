#pragma once

#include "core/error.hpp"
#include "remat/remat_sequence.hpp"
#include "runtime/model/model.hpp"
#include "schedule/stage.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace madpipe::runtime {

// What is stored for one micro-batch of a stage running a sequence, in the chain's indexing
// (remat_chain.hpp): a_j for j = 0..n (a_0 the stage input, a_n its output), the recorded
// forwards 1..n+1 (n + 1 the loss), the gradients delta_j. The same rules decide, before anything
// runs (StageSequence's constructor) and before each op at run time, whether an op may run.
struct SequencePresence {
  std::vector<char> plain;     // [0..n] a plain a_j on the device (no graph)
  std::vector<char> host;      // [0..n] a_j offloaded: only its host copy may be used (after P)
  std::vector<char> recorded;  // [0..n+1] F^all of layer k ran and B_k has not (0 unused)
  std::vector<char> gradient;  // [0..n] delta_j is there

  explicit SequencePresence(int n = 0);
  // a_j usable on the device as the input of layer j + 1: plain, or the output of a recorded
  // forward, and not offloaded.
  bool available(int j) const;
  // Only delta_0 left.
  bool finished() const;
};

// The state one micro-batch keeps between the forward part of its stage's sequence (ops up to
// and including Loss, run by the pattern's F op) and its backward part (the rest, run by its B
// op): the checkpoints, recorded layers and host copies the forward part left.
struct SequenceRun {
  ChainModel* model = nullptr;        // the weight copy of the micro-batch's first forward
  bool needs_input_gradient = false;  // delta_0 is sent to the previous stage
  SequencePresence presence;
  std::vector<torch::Tensor> plain;  // [0..n]
  std::vector<torch::Tensor> host;   // [0..n] host copies (pinned when the stage is on CUDA)
  std::vector<c10::Device> home;     // [0..n] device an offloaded a_j returns to
  std::vector<std::shared_ptr<c10::Event>> ready;  // [0..n] CUDA: end of a_j's prefetch copy
  std::vector<torch::Tensor> evicted;  // [0..n] offloaded a_j whose storage was freed (P refills)
  // [1..n] what the recorded graph of layer k saved (collected when an offload moves abar_k)
  std::vector<std::vector<torch::Tensor>> saved;
  // [0..n] the storages an offload of a_j freed (a_j's, abar_j's), each with its host bytes
  std::vector<std::vector<std::pair<torch::Tensor, torch::Tensor>>> parked;
  std::vector<torch::Tensor> leaf;      // [1..n+1] detached input of a recorded forward
  std::vector<torch::Tensor> recorded;  // [1..n+1] its output, with the graph (the loss: n + 1)
  std::vector<torch::Tensor> gradient;  // [0..n] delta_j (delta_0 may be undefined: not needed)
  std::vector<int> forwards;            // [1..n] forwards of layer k run so far
  // [1..n] generator states at the first forward, of the layers that drew random numbers
  std::vector<torch::Tensor> rng_cpu, rng_device;
  // Seeds the generators before a layer's first forward (global layer index); may be null.
  std::function<void(int layer)> seed_layer;
  bool computes_loss = false;  // last stage: Loss recorded the loss, dLoss backpropagates it
  torch::Tensor output;        // handed to the next stage (a_n) or the scaled loss, detached
  // a_0's storage (a receive buffer, an arena, the data's tensor): an offload never frees it in
  // place, even when a layer's output shares it (a view of the stage input).
  const c10::StorageImpl* input_storage = nullptr;
};

// The operation sequence of one stage (Stage::sequence), parsed and checked. Execution follows
// the thesis' PyTorch realization: F^all runs with grad recording on a detached input leaf,
// F^ck and F^none under NoGradGuard (F^none drops its plain input), B_k backpropagates the
// recorded layer k alone and yields the gradient of its input. O_k copies a_{k-1} (the plain
// tensor, else the output of the recorded forward of layer k - 1) to host memory (pinned, on a
// side stream, when it is on CUDA; a plain host copy on CPU) and drops the device tensor the
// sequence holds; until P_k copies it back, no op may read a_{k-1}. When a_{k-1} is the output of
// a recorded forward, O_k moves abar_{k-1}: the tensors that forward's graph saved too (collected
// by SavedTensorCollector). The graphs hold on to what they saved, so when P_k comes before any
// forward of layer k - 1 again, O_k frees the memory of each storage itself, which every
// reference shares, and P_k refills it in place (autograd finds its saved tensors unchanged).
// Storages that the run needs meanwhile are only copied: the stage input a_0 (a receive buffer
// or the data's tensor), the stage's weights, and what another tensor of the run shares. A layer
// forwarded again (a recomputation) sees the random generator state of its first forward and leaves
// its buffers (batch-norm running statistics) as they were.
class StageSequence {
 public:
  // Throws Error{InvalidInput} naming the stage and the op when the text does not parse, names a
  // layer outside the stage, or some op would miss its input (or the end would hold more than
  // the input gradient): checked here, on every rank, so no rank starts a step that fails.
  explicit StageSequence(const schedule::Stage& stage);

  int stage() const noexcept { return stage_; }
  // The ops in the order they run: as written, but for prefetches delayed (delay_prefetches).
  const remat::RematSequence& ops() const noexcept { return ops_; }
  std::size_t loss_index() const noexcept { return loss_index_; }

  // Maps the stage output a_n to the scaled loss (last stage only; recorded by Loss).
  using LossFn = std::function<torch::Tensor(const torch::Tensor& output)>;
  // Gives the gradient of the stage output (other stages; called by dLoss).
  using GradientFn = std::function<torch::Tensor()>;

  // Runs the forward part on `input` (a_0) with the weights of `model`; `seed_layer` (may be
  // null) before each layer's first forward, which recomputations replay.
  std::unique_ptr<SequenceRun> forward(ChainModel& model, const torch::Tensor& input,
                                       bool needs_input_gradient, const LossFn& loss,
                                       std::function<void(int layer)> seed_layer = {}) const;
  // Runs the backward part; returns delta_0 (undefined when !needs_input_gradient).
  torch::Tensor backward(SequenceRun& run, const GradientFn& gradient) const;
  // Once the output (a_n) has been sent: the backward needs its graph, never its values, which
  // are dropped (their storage lives on in the transport until the send completes, and in what
  // the graph saved). Kept when another tensor of the run shares the storage.
  void release_output(SequenceRun& run) const;

 private:
  void run_op(SequenceRun& run, std::size_t index, const LossFn& loss,
              const GradientFn& gradient) const;
  void execute_op(SequenceRun& run, std::size_t index, const LossFn& loss,
                  const GradientFn& gradient) const;
  // One handler per kind of op.
  void forward_all(SequenceRun& run, std::size_t index, const LossFn& loss) const;
  void forward_without_graph(SequenceRun& run, std::size_t index) const;
  void backward_op(SequenceRun& run, std::size_t index, const GradientFn& gradient) const;
  void offload(SequenceRun& run, std::size_t index) const;
  void prefetch(SequenceRun& run, std::size_t index) const;
  torch::Tensor input_of(SequenceRun& run, std::size_t index, int j) const;
  torch::Tensor forward_layer(SequenceRun& run, int k, const torch::Tensor& x) const;
  void delay_prefetches();
  // Throws Error{kind} naming the stage and op `index` (of the sequence as written).
  [[noreturn]] void fail(std::size_t index, const std::string& problem, ErrorKind kind) const;

  int stage_ = 0;
  int first_layer_ = 0;
  int n_ = 0;  // layers of the stage; the loss is n + 1
  remat::RematChain chain_;
  remat::RematSequence ops_;
  std::size_t loss_index_ = 0;
  std::vector<char> recomputed_;             // [1..n] layer k is forwarded more than once
  std::vector<std::size_t> original_index_;  // [op] its index in the sequence as written
  // [op] an offload whose prefetch comes before a_{k-1} is computed again
  std::vector<char> frees_storage_;
  std::vector<char> collects_;  // [1..n] F^all of layer k collects what its graph saves
};

}  // namespace madpipe::runtime
