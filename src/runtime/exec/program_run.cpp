// PipelineExecutor::execute: one run of a lowered program on this rank, as a short dispatch loop
// over its instructions. The state the instructions share lives in a Run; what a stage holds
// between its instructions (activation slots, inputs and gradients delivered to it, what its
// backwards left to W) in the Run's Stage objects; each instruction kind has one handler.
#include "core/error.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/saved_tensors.hpp"
#include "runtime/model/weight_gradients.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <utility>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

using madpipe::plan::Instr;
using madpipe::plan::InstrKind;
using madpipe::plan::TraceOpKind;
using madpipe::plan::TraceTransferKind;

namespace {
// The micro-batches' losses, reported in the order they were computed. On a GPU one is read only
// once the device has computed it: reading it earlier would wait for the device, which would then
// idle until the host has queued the next instructions' kernels.
class LossReader {
 public:
  LossReader(const c10::Device& device, const std::function<void(int, double)>& on_loss)
      : device_(device), on_loss_(on_loss) {}
  void add(int micro_batch, const torch::Tensor& value) {
    Pending pending{micro_batch, value.detach(), std::nullopt};
    if (!device_.is_cpu()) {
      pending.computed.emplace(device_.type());
      pending.computed->record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
    }
    pending_.push_back(std::move(pending));
    read_computed();
  }
  void read_computed() {
    while (!pending_.empty() && (!pending_.front().computed || pending_.front().computed->query()))
      read_front();
  }
  bool unread() const noexcept { return !pending_.empty(); }
  madpipe::runtime::StepLoss finish() {
    while (!pending_.empty()) read_front();
    return loss_;
  }

 private:
  struct Pending {
    int micro_batch;
    torch::Tensor value;
    std::optional<c10::Event> computed;
  };
  void read_front() {
    const double value = pending_.front().value.item<double>();
    loss_.sum += value;
    ++loss_.count;
    if (on_loss_) on_loss_(pending_.front().micro_batch, value);
    pending_.pop_front();
  }
  c10::Device device_;
  const std::function<void(int, double)>& on_loss_;
  std::deque<Pending> pending_;
  madpipe::runtime::StepLoss loss_;
};

std::int64_t bytes_of(const torch::Tensor& t) {
  return static_cast<std::int64_t>(t.numel()) * t.element_size();
}

// The tensor of micro-batch i waiting in `place` for `instr`, taken out of it.
torch::Tensor take(std::map<int, torch::Tensor>& place, int i, const Instr& instr,
                   const char* what) {
  auto it = place.find(i);
  if (it == place.end())
    throw madpipe::Error(
        madpipe::ErrorKind::Internal, "", "program",
        madpipe::plan::to_string(instr) + ": " + what + " was not delivered before it");
  torch::Tensor out = std::move(it->second);
  place.erase(it);
  return out;
}

// A stage that passes its input or its output's gradient through (dropout in validation, an
// identity layer) gives back a view of a receive buffer, which a later message may overwrite
// before a send of it completes or the next stage on the rank reads it: such a tensor leaves the
// arena as a copy.
torch::Tensor outside_arena(const torch::Tensor& t, const torch::Tensor& arena) {
  if (!arena.defined() || !t.defined() || !t.storage().is_alias_of(arena.storage())) return t;
  return t.detach().clone();
}

madpipe::runtime::MessageKey message_key(const Instr& instr) {
  using madpipe::runtime::Direction;
  return madpipe::runtime::MessageKey{
      madpipe::plan::carries_gradient(instr.kind) ? Direction::Gradient : Direction::Activation,
      instr.stage, instr.micro_batch, instr.sequence};
}
}  // namespace

class madpipe::runtime::PipelineExecutor::Run {
 public:
  Run(PipelineExecutor& executor, const plan::Program& program,
      const std::function<Batch(int)>& batch_of, bool train);
  // Instruction k of the rank's list, then the receive buffers it was the last use of and the
  // sends the program completes after it.
  void execute(std::size_t k);
  // Waits for the sends, checks that every W ran, and reports the losses.
  StepLoss finish();
  std::size_t size() const noexcept { return list_.size(); }

 private:
  // What a stage holds between its instructions, by micro-batch.
  struct Slot {
    torch::Tensor input;               // leaf whose gradient goes to the previous stage
    torch::Tensor output;              // stage output (or the scaled loss on the last stage)
    std::unique_ptr<SequenceRun> run;  // a stage with a sequence: what its forward part kept
  };
  struct Stage {
    std::vector<Slot> slots;                    // the program's activation slots
    std::map<int, torch::Tensor> inputs;        // received or handed over, before the F using it
    std::map<int, torch::Tensor> output_grads;  // the gradient of its output, before its B
    std::map<int, torch::Tensor> input_grads;   // from its B, before their hand-over or send
    std::map<int, c10::intrusive_ptr<DeferredWeightGradients>> deferred;  // from B, for W
  };

  void post_receive(const Instr& instr);
  void receive(const Instr& instr);
  void forward(const Instr& instr);
  void pass_activation(const Instr& instr);  // HandAct or SendAct
  void backward(const Instr& instr);
  void backward_weight(const Instr& instr);
  void hand_gradient(const Instr& instr);
  void send_gradient(const Instr& instr);
  void optimizer_step(const Instr& instr);
  const Batch& batch(int i);
  // Times the compute op that `body` runs, as kind `kind` of (stage, micro-batch).
  template <typename Body>
  void timed(TraceOpKind kind, const Instr& instr, Body&& body);
  // The backward of micro-batch i on stage s is done (at its W on a split stage).
  void backward_done(int s, int i);

  PipelineExecutor& x_;
  const plan::Program& program_;
  const std::function<Batch(int)>& batch_of_;
  const bool train_;
  const std::vector<Instr>& list_;
  const std::vector<plan::ReceiveBuffer>& buffers_;
  const int num_stages_;
  // The loss is divided so that accumulated gradients are those of one update: the step's
  // micro-batches, or the m of an update inside the program (two weight versions).
  const int loss_divisor_;
  std::vector<Stage> stages_;
  std::vector<std::vector<int>> free_after_;  // receive buffers whose last use is instruction k
  // Sends completed after an instruction (where the program knows the peer has them): what a
  // rank holds for its sends is then bounded as program_memory counts it.
  std::vector<std::vector<int>> complete_after_;
  std::map<int, const plan::ReceiveBuffer*> live_;  // receive buffers in use, by index
  std::int64_t live_bytes_ = 0;
  ArenaUse use_;
  std::map<int, Batch> batches_;
  TraceRecorder* const trace_;
  // Stage times on the CPU are the thread's CPU time, as the profile of madpipe train measures
  // them (the trace keeps the wall clock).
  const bool cpu_clock_;
  std::vector<TimedOp> timed_;
  LossReader losses_;
  MemoryMeter meter_;
  const bool metered_;
};

madpipe::runtime::PipelineExecutor::Run::Run(PipelineExecutor& executor,
                                             const plan::Program& program,
                                             const std::function<Batch(int)>& batch_of, bool train)
    : x_(executor),
      program_(program),
      batch_of_(batch_of),
      train_(train),
      list_(program.per_gpu.at(executor.rank_)),
      buffers_(program.receive_buffers.at(executor.rank_)),
      num_stages_(static_cast<int>(program.slots.size())),
      loss_divisor_(program.update_micro_batches > 0 ? program.update_micro_batches
                                                     : program.micro_batches),
      stages_(program.slots.size()),
      free_after_(list_.size()),
      complete_after_(list_.size()),
      trace_(train && executor.recorder_ && executor.recorder_->recording() ? executor.recorder_
                                                                            : nullptr),
      cpu_clock_(executor.device_.is_cpu()),
      losses_(executor.device_, executor.on_loss_),
      meter_(executor.device_),
      metered_(train && meter_.counting()) {
  if (program.train != train)
    throw Error(ErrorKind::Internal, "", "program",
                std::string(program.train ? "a training" : "a validation") + " program run as " +
                    (train ? "training" : "validation"));
  if (train && x_.copy_of_ && program.update_micro_batches == 0)
    throw Error(ErrorKind::Internal, "", "program",
                "two weight versions need a program with its optimizer steps");
  const std::int64_t arena_bytes = program.arena_bytes.at(x_.rank_);
  if (arena_bytes > 0 && (!x_.arena_.defined() || x_.arena_.numel() < arena_bytes))
    x_.arena_ =
        torch::empty({arena_bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(x_.device_));
  if (x_.rank_ < static_cast<int>(program.send_completions.size()))
    for (std::size_t k = 0; k < list_.size(); ++k) {
      const int after = program.send_completions[x_.rank_].at(k);
      if (after >= 0 && after < static_cast<int>(list_.size()))
        complete_after_[after].push_back(static_cast<int>(k));
    }
  use_.planned_bytes = arena_bytes;
  use_.buffers = static_cast<int>(buffers_.size());
  for (int b = 0; b < static_cast<int>(buffers_.size()); ++b) {
    free_after_.at(buffers_[b].last_use).push_back(b);
    use_.sum_bytes += buffers_[b].bytes;
  }
  for (int s = 0; s < num_stages_; ++s) stages_[s].slots.resize(program.slots[s]);
  // Forwards and backwards of a training run are timed on the device and accounted later
  // (settle_stage_times).
  if (train) {
    x_.settle_stage_times();
    x_.timer_->start_run(trace_ ? trace_->now_ms() : 0);
  }
  if (metered_) meter_.interval_peak();  // what came before the program is not its instructions'
}

void madpipe::runtime::PipelineExecutor::Run::execute(std::size_t k) {
  const Instr& instr = list_[k];
  switch (instr.kind) {
    case InstrKind::PostRecvAct:
    case InstrKind::PostRecvGrad:
      post_receive(instr);
      break;
    case InstrKind::RecvAct:
    case InstrKind::RecvGrad:
      receive(instr);
      break;
    case InstrKind::Forward:
      forward(instr);
      break;
    case InstrKind::HandAct:
    case InstrKind::SendAct:
      pass_activation(instr);
      break;
    case InstrKind::Backward:
      backward(instr);
      break;
    case InstrKind::BackwardWeight:
      backward_weight(instr);
      break;
    case InstrKind::HandGrad:
      hand_gradient(instr);
      break;
    case InstrKind::SendGrad:
      send_gradient(instr);
      break;
    case InstrKind::OptimizerStep:
      optimizer_step(instr);
      break;
  }
  for (int b : free_after_[k]) {
    live_bytes_ -= buffers_[b].bytes;
    live_.erase(b);
  }
  for (int sent : complete_after_[k])
    x_.transport_.wait_send(list_[sent].peer, message_key(list_[sent]));
  losses_.read_computed();
  if (metered_) {
    const std::int64_t held = meter_.interval_peak();
    if (held > x_.memory_peak_.bytes) x_.memory_peak_ = {held, plan::to_string(instr)};
  }
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::Run::finish() {
  x_.transport_.wait_sends();
  for (int s = 0; s < num_stages_; ++s)
    if (!stages_[s].deferred.empty())
      throw Error(ErrorKind::Internal, "", "program",
                  "the W of stage " + std::to_string(s) + ", micro-batch " +
                      std::to_string(stages_[s].deferred.begin()->first) + " never ran");
  // Reading the last losses waits for the device: for a peer's message too, with the deadline.
  if (losses_.unread()) x_.transport_.await_compute("for the losses of the last micro-batches");
  const StepLoss loss = losses_.finish();
  if (train_) {
    x_.arena_use_ = use_;
    x_.unsettled_ops_ = std::move(timed_);
    // A traced run's ops go to the trace now, with their times (which waits for the device).
    if (trace_) x_.settle_stage_times(trace_);
  }
  return loss;
}

const madpipe::runtime::Batch& madpipe::runtime::PipelineExecutor::Run::batch(int i) {
  auto it = batches_.find(i);
  if (it == batches_.end()) it = batches_.emplace(i, batch_of_(i)).first;
  return it->second;
}

template <typename Body>
void madpipe::runtime::PipelineExecutor::Run::timed(TraceOpKind kind, const Instr& instr,
                                                    Body&& body) {
  const int op = train_ ? x_.timer_->begin() : -1;
  const double cpu_start = cpu_clock_ ? thread_cpu_seconds() : 0;
  body();
  if (!train_) return;
  x_.timer_->end(op);
  timed_.push_back({kind, instr.stage, instr.micro_batch,
                    cpu_clock_ ? 1e3 * (thread_cpu_seconds() - cpu_start) : 0});
}

void madpipe::runtime::PipelineExecutor::Run::backward_done(int s, int i) {
  if (x_.after_backward_) x_.after_backward_(s, i);
  if (x_.on_backward_) x_.on_backward_(s, i);
}

void madpipe::runtime::PipelineExecutor::Run::post_receive(const Instr& instr) {
  const plan::ReceiveBuffer& buffer = buffers_.at(instr.buffer);
  if (buffer.offset >= 0)
    for (const auto& [other, placed] : live_)
      if (buffer.offset < placed->offset + placed->bytes &&
          placed->offset < buffer.offset + buffer.bytes)
        throw Error(ErrorKind::Internal, "", "receive arena",
                    "the buffer of " + plan::to_string(instr) + " overlaps the live buffer " +
                        std::to_string(other));
  live_.emplace(instr.buffer, &buffer);
  live_bytes_ += buffer.bytes;
  use_.peak_live_bytes = std::max(use_.peak_live_bytes, live_bytes_);
  if (buffer.offset >= 0)
    use_.high_water_bytes = std::max(use_.high_water_bytes, buffer.offset + buffer.bytes);
  x_.transport_.post_recv(instr.peer, message_key(instr), x_.receive_buffer(instr, buffer));
}

void madpipe::runtime::PipelineExecutor::Run::receive(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  const bool gradient = instr.kind == InstrKind::RecvGrad;
  // An activation of stage s is the input of stage s + 1; a gradient is of stage s's output.
  std::map<int, torch::Tensor>& place =
      gradient ? stages_.at(s).output_grads : stages_.at(s + 1).inputs;
  place[i] = x_.transport_.wait_recv(instr.peer, message_key(instr));
  if (trace_)
    trace_->received(gradient ? TraceTransferKind::Gradient : TraceTransferKind::Activation, s, i,
                     instr.peer, trace_->now_ms());
}

void madpipe::runtime::PipelineExecutor::Run::forward(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  const bool last = s == num_stages_ - 1;
  Stage& stage = stages_[s];
  const torch::Tensor input = s == 0 ? batch(i).input : take(stage.inputs, i, instr, "its input");
  // The first stage uses the micro-batch's input only, the last its target only: neither holds
  // the other part while it computes.
  if (s == 0 && !last) batches_.erase(i);
  timed(TraceOpKind::Forward, instr, [&] {
    // The loss of the last stage, divided so that accumulated gradients are the update's.
    auto scaled_loss = [&](const torch::Tensor& output) {
      const torch::Tensor target = batch(i).target;
      if (s > 0) batches_.erase(i);
      torch::Tensor value = x_.model_.loss(output, target);
      losses_.add(i, value);
      return value / loss_divisor_;
    };
    // Validation runs on the executor's own model (which holds the newest weights).
    const int copy = x_.copy_of_ && train_ ? x_.copy_of_(s, i) : 0;
    std::optional<std::uint64_t> random_key;
    if (train_ && x_.random_key_) random_key = x_.random_key_(i);
    Slot& slot = stage.slots.at(instr.slot);
    if (slot.output.defined())
      throw Error(ErrorKind::Internal, "", "program",
                  plan::to_string(instr) + ": activation slot " + std::to_string(instr.slot) +
                      " of stage " + std::to_string(s) + " is still in use");
    if (train_ && x_.sequences_[s]) {
      // A recomputation in the backward part uses this micro-batch's weight copy (kept in the
      // run), whatever copy_of would say then.
      std::function<void(int)> seed_layer;
      if (random_key)
        seed_layer = [key = *random_key, device = x_.device_](int layer) {
          seed_layer_forward(key, layer, device);
        };
      slot.run = x_.sequences_[s]->forward(
          x_.model_of(copy), input, s > 0,
          last ? StageSequence::LossFn(scaled_loss) : StageSequence::LossFn(),
          std::move(seed_layer));
      slot.output = slot.run->output;
      return;
    }
    torch::Tensor in = s > 0 && train_ ? input.detach().requires_grad_(true) : input;
    if (train_) slot.input = in;
    c10::intrusive_ptr<DeferredWeightGradients> defer_into;
    if (train_ && x_.plan_.stages[s].splits_backward()) {
      defer_into = c10::make_intrusive<DeferredWeightGradients>();
      if (!stage.deferred.emplace(i, defer_into).second)
        throw Error(ErrorKind::Internal, "", "program",
                    plan::to_string(instr) + ": the W of an earlier forward has not run");
    }
    slot.output = x_.forward_stage(s, in, copy, defer_into, random_key);
    if (last) slot.output = scaled_loss(slot.output);
  });
  if (last || s == 0) batches_.erase(i);
  if (!train_ && last) stage.slots.at(instr.slot) = Slot{};  // validation keeps nothing of it
}

void madpipe::runtime::PipelineExecutor::Run::pass_activation(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  Slot& slot = stages_[s].slots.at(instr.slot);
  if (instr.kind == InstrKind::HandAct) {
    stages_.at(s + 1).inputs[i] = outside_arena(slot.output.detach(), x_.arena_);
    // The next stage holds the values (they are its input) as long as it needs them.
    if (train_ && !slot.run) release_values(slot.output);
  } else {
    x_.transport_.post_send(instr.peer, message_key(instr), outside_arena(slot.output, x_.arena_));
    if (trace_)
      trace_->sent(TraceTransferKind::Activation, s, i, instr.peer, bytes_of(slot.output),
                   trace_->now_ms());
    // The backward needs the output's autograd node, not its values: they live on in the
    // transport until the send completes, and no longer here (the memory model keeps one
    // send buffer per cut, not one output per micro-batch in flight).
    if (train_ && slot.run) x_.sequences_[s]->release_output(*slot.run);
    if (train_ && !slot.run) release_values(slot.output);
  }
  if (!train_) slot = Slot{};  // validation: the output has gone
}

void madpipe::runtime::PipelineExecutor::Run::backward(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  const bool last = s == num_stages_ - 1;
  Stage& stage = stages_[s];
  Slot slot = std::move(stage.slots.at(instr.slot));
  stage.slots[instr.slot] = Slot{};
  // The gradient from the next stage (none on the last), before the backward starts.
  const torch::Tensor grad =
      last ? torch::Tensor() : take(stage.output_grads, i, instr, "its output's gradient");
  timed(TraceOpKind::Backward, instr, [&] {
    if (slot.run) {
      torch::Tensor delta = x_.sequences_[s]->backward(
          *slot.run, last ? StageSequence::GradientFn()
                          : StageSequence::GradientFn([&grad]() { return grad; }));
      slot.run.reset();
      if (s > 0) stage.input_grads[i] = delta;
      return;
    }
    if (last)
      slot.output.backward();
    else
      backward_from(slot.output, grad);
    if (s > 0) stage.input_grads[i] = slot.input.grad();
  });
  if (x_.plan_.stages[s].splits_backward()) {
    // What W needs outlives the receive buffers it may sit in (of the input, of the gradient):
    // later messages overwrite them.
    stage.deferred.at(i)->copy_out_of(x_.arena_);
    return;  // the backward is done at W
  }
  backward_done(s, i);
}

void madpipe::runtime::PipelineExecutor::Run::backward_weight(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  auto& deferred = stages_[s].deferred;
  auto it = deferred.find(i);
  if (it == deferred.end())
    throw Error(ErrorKind::Internal, "", "program",
                plan::to_string(instr) + ": no forward of a split stage before it");
  timed(TraceOpKind::Weight, instr, [&] { it->second->run(); });
  deferred.erase(it);
  backward_done(s, i);
}

// The gradient of stage s's output comes from the backward of stage s + 1.
void madpipe::runtime::PipelineExecutor::Run::hand_gradient(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  stages_.at(s).output_grads[i] =
      outside_arena(take(stages_.at(s + 1).input_grads, i, instr, "the gradient"), x_.arena_);
}

void madpipe::runtime::PipelineExecutor::Run::send_gradient(const Instr& instr) {
  const int s = instr.stage, i = instr.micro_batch;
  const torch::Tensor grad =
      outside_arena(take(stages_.at(s + 1).input_grads, i, instr, "the gradient"), x_.arena_);
  x_.transport_.post_send(instr.peer, message_key(instr), grad);
  if (trace_)
    trace_->sent(TraceTransferKind::Gradient, s, i, instr.peer, bytes_of(grad), trace_->now_ms());
}

void madpipe::runtime::PipelineExecutor::Run::optimizer_step(const Instr& instr) {
  if (!x_.optimizer_step_)
    throw Error(ErrorKind::Internal, "", "program",
                plan::to_string(instr) + ": the program steps optimizers but none is set");
  x_.optimizer_step_(instr.stage, instr.micro_batch);
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::execute(
    const plan::Program& program, const std::function<Batch(int)>& batch_of, bool train) {
  Run run(*this, program, batch_of, train);
  for (std::size_t k = 0; k < run.size(); ++k) run.execute(k);
  return run.finish();
}
