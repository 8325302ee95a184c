#include "runtime/executor.hpp"

#include "core/error.hpp"
#include "runtime/memory_meter.hpp"
#include "runtime/weight_gradients.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/engine.h>

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
}  // namespace

static std::int64_t bytes_of(const torch::Tensor& t) {
  return static_cast<std::int64_t>(t.numel()) * t.element_size();
}

madpipe::runtime::LayerOutputs madpipe::runtime::probe_layer_outputs(ChainModel& model,
                                                                     const Batch& sample) {
  torch::NoGradGuard no_grad;
  const torch::Device device = sample.input.device();
  LayerOutputs outputs;
  outputs.device = device;
  torch::Tensor x = sample.input;
  for (int l = 0; l < model.size(); ++l) {
    if (model.holds(l)) {
      std::vector<torch::Tensor> buffers = model.layers[l].ptr()->buffers(), saved;
      for (const torch::Tensor& b : buffers) saved.push_back(b.clone());
      x = model.layers[l].forward(x);
      for (std::size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(saved[b]);
    } else {
      model.materialize(l, device);  // for this forward alone
      x = model.layers[l].forward(x);
      model.drop(l);
    }
    outputs.shapes.push_back(x.sizes().vec());
    outputs.dtypes.push_back(x.scalar_type());
  }
  return outputs;
}

std::vector<std::int64_t> madpipe::runtime::stage_message_bytes(const plan::Plan& plan,
                                                                const LayerOutputs& outputs) {
  std::vector<std::int64_t> bytes;
  for (const schedule::Stage& stage : plan.stages) {
    std::int64_t numel = 1;
    for (std::int64_t d : outputs.shapes.at(stage.last_layer)) numel *= d;
    bytes.push_back(
        numel * static_cast<std::int64_t>(c10::elementSize(outputs.dtypes.at(stage.last_layer))));
  }
  return bytes;
}

madpipe::runtime::PipelineExecutor::PipelineExecutor(ChainModel& model, const plan::Plan& plan,
                                                     int rank, Transport& transport,
                                                     const Batch& sample)
    : PipelineExecutor(model, plan, rank, transport, probe_layer_outputs(model, sample)) {}

madpipe::runtime::PipelineExecutor::PipelineExecutor(ChainModel& model, const plan::Plan& plan,
                                                     int rank, Transport& transport,
                                                     const LayerOutputs& outputs)
    : model_(model), plan_(plan), rank_(rank), transport_(transport) {
  if (plan.stages.empty() ||
      plan.stages.back().last_layer + 1 != static_cast<int>(model.layers.size()))
    throw Error(ErrorKind::InvalidInput, "", "/stages",
                "the plan covers " +
                    std::to_string(plan.stages.empty() ? 0 : plan.stages.back().last_layer + 1) +
                    " layers but the model has " + std::to_string(model.layers.size()));
  if (outputs.shapes.size() != model.layers.size() || outputs.dtypes.size() != model.layers.size())
    throw Error(ErrorKind::Internal, "", "layer outputs",
                "shapes of " + std::to_string(outputs.shapes.size()) + " layers for a model of " +
                    std::to_string(model.layers.size()));
  // Every rank checks every stage's sequence, so a bad one stops all ranks before any transfer.
  for (const schedule::Stage& stage : plan.stages) {
    sequences_.push_back(stage.sequence.empty() ? nullptr : std::make_unique<StageSequence>(stage));
    output_shapes_.push_back(outputs.shapes[stage.last_layer]);
    output_dtypes_.push_back(outputs.dtypes[stage.last_layer]);
  }
  message_bytes_ = stage_message_bytes(plan, outputs);
  stage_times_.resize(plan.stages.size());
  device_ = outputs.device;
  timer_ = make_op_timer(device_);
}

void madpipe::runtime::PipelineExecutor::reset_stage_times() {
  settle_stage_times();
  stage_times_.assign(plan_.stages.size(), StageTime{});
}

const std::vector<madpipe::runtime::StageTime>& madpipe::runtime::PipelineExecutor::stage_times() {
  settle_stage_times();
  return stage_times_;
}

void madpipe::runtime::PipelineExecutor::settle_stage_times(TraceRecorder* trace) {
  if (unsettled_ops_.empty()) return;
  const std::vector<OpTimer::Span> spans = timer_->finish_run();
  const bool cpu_clock = device_.is_cpu();
  for (std::size_t k = 0; k < spans.size() && k < unsettled_ops_.size(); ++k) {
    const TimedOp& t = unsettled_ops_[k];
    StageTime& time = stage_times_[t.stage];
    const double took = cpu_clock ? t.cpu_ms : spans[k].end_ms - spans[k].start_ms;
    if (t.kind == TraceOpKind::Forward) {
      time.forward_ms += took;
      ++time.forwards;
    } else {
      time.backward_ms += took;  // W is the rest of its B: one backward's time
      if (t.kind == TraceOpKind::Backward) ++time.backwards;
    }
    if (trace) trace->op(t.kind, t.stage, t.micro_batch, spans[k].start_ms, spans[k].end_ms);
  }
  unsettled_ops_.clear();
}

std::vector<int> madpipe::runtime::PipelineExecutor::local_stages() const {
  std::vector<int> out;
  for (const schedule::Stage& stage : plan_.stages)
    if (stage.gpu == rank_) out.push_back(stage.id);
  return out;
}

std::vector<torch::Tensor> madpipe::runtime::PipelineExecutor::stage_buffers(int stage,
                                                                             int copy) const {
  const ChainModel& model = copy == 1 && second_ ? *second_ : model_;
  return model.buffers(plan_.stages[stage].first_layer, plan_.stages[stage].last_layer);
}

std::vector<torch::Tensor> madpipe::runtime::PipelineExecutor::stage_parameters(int stage,
                                                                                int copy) const {
  const ChainModel& model = copy == 1 && second_ ? *second_ : model_;
  return model.parameters(plan_.stages[stage].first_layer, plan_.stages[stage].last_layer);
}

madpipe::runtime::StageState madpipe::runtime::PipelineExecutor::stage_state(
    int stage, torch::optim::Optimizer* optimizer, int copy) const {
  const int first = plan_.stages[stage].first_layer, last = plan_.stages[stage].last_layer;
  return StageState{stage_parameters(stage, copy), stage_buffers(stage), optimizer,
                    model_.parameter_keys(first, last), model_.buffer_keys(first, last)};
}

void madpipe::runtime::PipelineExecutor::use_two_weight_copies(
    ChainModel& second, std::function<int(int, int)> copy_of,
    std::function<void(int, int)> after_backward) {
  second_ = &second;
  copy_of_ = std::move(copy_of);
  after_backward_ = std::move(after_backward);
}

torch::Tensor madpipe::runtime::PipelineExecutor::forward_stage(
    int stage, torch::Tensor input, int copy,
    const c10::intrusive_ptr<DeferredWeightGradients>& defer_into,
    std::optional<std::uint64_t> random_key) {
  ChainModel& model = model_of(copy);
  std::optional<DeferWeightGradients> defer;
  if (defer_into) defer.emplace(defer_into);
  for (int l = plan_.stages[stage].first_layer; l <= plan_.stages[stage].last_layer; ++l) {
    if (random_key) seed_layer_forward(*random_key, l, device_);
    input = model.layers[l].forward(input);
  }
  return input;
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::run(
    const plan::Program& program, const std::function<Batch(int)>& batch_of) {
  return execute(program, batch_of, true);
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::evaluate(
    const plan::Program& program, const std::function<Batch(int)>& batch_of) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<torch::nn::Module*, bool>> modes;  // each local layer's mode before
  for (int s : local_stages())
    for (int l = plan_.stages[s].first_layer; l <= plan_.stages[s].last_layer; ++l) {
      torch::nn::Module* layer = model_.layers[l].ptr().get();
      modes.emplace_back(layer, layer->is_training());
      layer->eval();
    }
  struct RestoreModes {
    std::vector<std::pair<torch::nn::Module*, bool>>& modes;
    ~RestoreModes() {
      for (auto& [layer, training] : modes) layer->train(training);
    }
  } restore{modes};
  return execute(program, batch_of, false);
}

namespace {
// Where the executor keeps data between instructions, by what it is: (gradient, stage,
// micro-batch) names the output of stage s for micro-batch i, or its gradient.
using DataKey = std::tuple<bool, int, int>;

// Frees the values of a stage output that has been sent or handed over, keeping its autograd
// node for the backward (an output without one keeps its values: nothing would run from it).
void release_values(torch::Tensor& output) {
  if (output.grad_fn() == nullptr) return;
  output.set_data(torch::empty({0}, output.options().requires_grad(false)));
}

// output.backward(grad), also for an output whose values were released: the engine checks the
// gradient against the shape its node recorded, not against the tensor's current one.
void backward_from(const torch::Tensor& output, const torch::Tensor& grad) {
  if (output.grad_fn() == nullptr) {
    output.backward(grad);  // fails as a plain backward would
    return;
  }
  torch::autograd::Engine::get_default_engine().execute(
      {torch::autograd::impl::gradient_edge(output)}, {grad}, /*keep_graph=*/false,
      /*create_graph=*/false, /*accumulate_grad=*/true);
}

torch::Tensor take(std::map<DataKey, torch::Tensor>& place, const DataKey& key, const Instr& instr,
                   const char* what) {
  auto it = place.find(key);
  if (it == place.end())
    throw madpipe::Error(
        madpipe::ErrorKind::Internal, "", "program",
        madpipe::plan::to_string(instr) + ": " + what + " was not delivered before it");
  torch::Tensor out = std::move(it->second);
  place.erase(it);
  return out;
}
}  // namespace

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::execute(
    const plan::Program& program, const std::function<Batch(int)>& batch_of, bool train) {
  if (program.train != train)
    throw Error(ErrorKind::Internal, "", "program",
                std::string(program.train ? "a training" : "a validation") + " program run as " +
                    (train ? "training" : "validation"));
  if (train && copy_of_ && program.update_micro_batches == 0)
    throw Error(ErrorKind::Internal, "", "program",
                "two weight versions need a program with its optimizer steps");
  const int num_stages = static_cast<int>(program.slots.size());
  const int n = program.micro_batches;
  const std::vector<Instr>& list = program.per_gpu.at(rank_);
  const std::vector<plan::ReceiveBuffer>& buffers = program.receive_buffers.at(rank_);
  const std::int64_t arena_bytes = program.arena_bytes.at(rank_);
  if (arena_bytes > 0 && (!arena_.defined() || arena_.numel() < arena_bytes))
    arena_ =
        torch::empty({arena_bytes}, torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  std::vector<std::vector<int>> free_after(list.size());
  // Sends completed after an instruction (where the program knows the peer has them): what a
  // rank holds for its sends is then bounded as program_memory counts it.
  std::vector<std::vector<int>> complete_after(list.size());
  if (rank_ < static_cast<int>(program.send_completions.size()))
    for (std::size_t x = 0; x < list.size(); ++x) {
      const int after = program.send_completions[rank_].at(x);
      if (after >= 0 && after < static_cast<int>(list.size())) complete_after[after].push_back(x);
    }
  ArenaUse use;
  use.planned_bytes = arena_bytes;
  use.buffers = static_cast<int>(buffers.size());
  for (int b = 0; b < static_cast<int>(buffers.size()); ++b) {
    free_after.at(buffers[b].last_use).push_back(b);
    use.sum_bytes += buffers[b].bytes;
  }
  std::map<int, const plan::ReceiveBuffer*> live;  // receive buffers in use, by index
  std::int64_t live_bytes = 0;
  struct Slot {
    torch::Tensor input;               // leaf whose gradient goes to the previous stage
    torch::Tensor output;              // stage output (or the scaled loss on the last stage)
    std::unique_ptr<SequenceRun> run;  // a stage with a sequence: what its forward part kept
  };
  std::vector<std::vector<Slot>> slots(num_stages);
  for (int s = 0; s < num_stages; ++s) slots[s].resize(program.slots[s]);
  std::map<DataKey, torch::Tensor> delivered;  // inputs and gradients, before the op using them
  std::map<DataKey, torch::Tensor> produced;   // gradients from a backward, before their move
  // Split stages: what the backward of (stage, micro-batch) left to its W.
  std::map<std::pair<int, int>, c10::intrusive_ptr<DeferredWeightGradients>> deferred;
  std::map<int, Batch> batches;
  auto batch = [&](int i) -> const Batch& {
    auto it = batches.find(i);
    if (it == batches.end()) it = batches.emplace(i, batch_of(i)).first;
    return it->second;
  };
  auto key_of = [](const Instr& instr) {
    return MessageKey{
        plan::carries_gradient(instr.kind) ? Direction::Gradient : Direction::Activation,
        instr.stage, instr.micro_batch, instr.sequence};
  };
  // The loss is divided so that accumulated gradients are those of one update: the step's
  // micro-batches, or the m of an update inside the program (two weight versions).
  const int loss_divisor = program.update_micro_batches > 0 ? program.update_micro_batches : n;
  TraceRecorder* const trace = train && recorder_ && recorder_->recording() ? recorder_ : nullptr;
  // Forwards and backwards of a training run are timed on the device and accounted later
  // (settle_stage_times). Stage times on the CPU are the thread's CPU time, as the profile of
  // madpipe train measures them (the trace keeps the wall clock).
  const bool cpu_clock = device_.is_cpu();
  if (train) {
    settle_stage_times();
    timer_->start_run(trace ? trace->now_ms() : 0);
  }
  std::vector<TimedOp> timed;
  LossReader losses(device_, on_loss_);
  MemoryMeter meter(device_);
  const bool metered = train && meter.counting();
  if (metered) meter.interval_peak();  // what came before the program is not its instructions'
  for (std::size_t k = 0; k < list.size(); ++k) {
    const Instr& instr = list[k];
    const int s = instr.stage, i = instr.micro_batch;
    const bool last = s == num_stages - 1;
    switch (instr.kind) {
      case InstrKind::PostRecvAct:
      case InstrKind::PostRecvGrad: {
        const plan::ReceiveBuffer& buffer = buffers.at(instr.buffer);
        if (buffer.offset >= 0)
          for (const auto& [other, placed] : live)
            if (buffer.offset < placed->offset + placed->bytes &&
                placed->offset < buffer.offset + buffer.bytes)
              throw Error(ErrorKind::Internal, "", "receive arena",
                          "the buffer of " + plan::to_string(instr) + " overlaps the live buffer " +
                              std::to_string(other));
        live.emplace(instr.buffer, &buffer);
        live_bytes += buffer.bytes;
        use.peak_live_bytes = std::max(use.peak_live_bytes, live_bytes);
        if (buffer.offset >= 0)
          use.high_water_bytes = std::max(use.high_water_bytes, buffer.offset + buffer.bytes);
        transport_.post_recv(instr.peer, key_of(instr), receive_buffer(instr, buffer));
        break;
      }
      case InstrKind::RecvAct:
      case InstrKind::RecvGrad: {
        const bool gradient = instr.kind == InstrKind::RecvGrad;
        delivered[{gradient, s, i}] = transport_.wait_recv(instr.peer, key_of(instr));
        if (trace)
          trace->received(gradient ? TraceTransferKind::Gradient : TraceTransferKind::Activation, s,
                          i, instr.peer, trace->now_ms());
        break;
      }
      case InstrKind::Forward: {
        const torch::Tensor input =
            s == 0 ? batch(i).input : take(delivered, {false, s - 1, i}, instr, "its input");
        const int op = train ? timer_->begin() : -1;
        const double cpu_start = cpu_clock ? thread_cpu_seconds() : 0;
        // The loss of the last stage, divided so that accumulated gradients are the update's.
        auto scaled_loss = [&](const torch::Tensor& output) {
          torch::Tensor value = model_.loss(output, batch(i).target);
          losses.add(i, value);
          return value / loss_divisor;
        };
        // Validation runs on the executor's own model (which holds the newest weights).
        const int copy = copy_of_ && train ? copy_of_(s, i) : 0;
        std::optional<std::uint64_t> random_key;
        if (train && random_key_) random_key = random_key_(i);
        Slot& slot = slots[s].at(instr.slot);
        if (slot.output.defined())
          throw Error(ErrorKind::Internal, "", "program",
                      plan::to_string(instr) + ": activation slot " + std::to_string(instr.slot) +
                          " of stage " + std::to_string(s) + " is still in use");
        if (train && sequences_[s]) {
          // A recomputation in the backward part uses this micro-batch's weight copy (kept in the
          // run), whatever copy_of would say then.
          std::function<void(int)> seed_layer;
          if (random_key)
            seed_layer = [key = *random_key, this](int layer) {
              seed_layer_forward(key, layer, device_);
            };
          slot.run = sequences_[s]->forward(
              model_of(copy), input, s > 0,
              last ? StageSequence::LossFn(scaled_loss) : StageSequence::LossFn(),
              std::move(seed_layer));
          slot.output = slot.run->output;
        } else {
          torch::Tensor x = s > 0 && train ? input.detach().requires_grad_(true) : input;
          if (train) slot.input = x;
          c10::intrusive_ptr<DeferredWeightGradients> defer_into;
          if (train && plan_.stages[s].splits_backward()) {
            defer_into = c10::make_intrusive<DeferredWeightGradients>();
            if (!deferred.emplace(std::make_pair(s, i), defer_into).second)
              throw Error(ErrorKind::Internal, "", "program",
                          plan::to_string(instr) + ": the W of an earlier forward has not run");
          }
          slot.output = forward_stage(s, x, copy, defer_into, random_key);
          if (last) slot.output = scaled_loss(slot.output);
        }
        if (train) {
          timer_->end(op);
          timed.push_back({TraceOpKind::Forward, s, i,
                           cpu_clock ? 1e3 * (thread_cpu_seconds() - cpu_start) : 0});
        }
        if (last || s == 0) batches.erase(i);
        if (!train && last) slot = Slot{};  // validation keeps nothing of the last stage
        break;
      }
      case InstrKind::HandAct:
      case InstrKind::SendAct: {
        Slot& slot = slots[s].at(instr.slot);
        if (instr.kind == InstrKind::HandAct) {
          delivered[{false, s, i}] = slot.output.detach();
          // The next stage holds the values (they are its input) as long as it needs them.
          if (train && !slot.run) release_values(slot.output);
        } else {
          transport_.post_send(instr.peer, key_of(instr), slot.output);
          if (trace)
            trace->sent(TraceTransferKind::Activation, s, i, instr.peer, bytes_of(slot.output),
                        trace->now_ms());
          // The backward needs the output's autograd node, not its values: they live on in the
          // transport until the send completes, and no longer here (the memory model keeps one
          // send buffer per cut, not one output per micro-batch in flight).
          if (train && !slot.run) release_values(slot.output);
        }
        if (!train) slot = Slot{};  // validation: the output has gone
        break;
      }
      case InstrKind::Backward: {
        Slot slot = std::move(slots[s].at(instr.slot));
        slots[s][instr.slot] = Slot{};
        // The gradient from the next stage (none on the last), before the backward starts.
        const torch::Tensor grad =
            last ? torch::Tensor() : take(delivered, {true, s, i}, instr, "its output's gradient");
        const int op = timer_->begin();
        const double cpu_start = cpu_clock ? thread_cpu_seconds() : 0;
        if (slot.run) {
          torch::Tensor delta = sequences_[s]->backward(
              *slot.run, last ? StageSequence::GradientFn()
                              : StageSequence::GradientFn([&grad]() { return grad; }));
          slot.run.reset();
          if (s > 0) produced[{true, s - 1, i}] = delta;
        } else {
          if (last)
            slot.output.backward();
          else
            backward_from(slot.output, grad);
          if (s > 0) produced[{true, s - 1, i}] = slot.input.grad();
        }
        timer_->end(op);
        timed.push_back({TraceOpKind::Backward, s, i,
                         cpu_clock ? 1e3 * (thread_cpu_seconds() - cpu_start) : 0});
        if (plan_.stages[s].splits_backward()) {
          // What W needs outlives the receive buffers it may sit in (of the input, of the
          // gradient): later messages overwrite them.
          deferred.at({s, i})->copy_out_of(arena_);
          break;  // the backward is done at W
        }
        if (after_backward_) after_backward_(s, i);
        if (on_backward_) on_backward_(s, i);
        break;
      }
      case InstrKind::BackwardWeight: {
        auto it = deferred.find({s, i});
        if (it == deferred.end())
          throw Error(ErrorKind::Internal, "", "program",
                      plan::to_string(instr) + ": no forward of a split stage before it");
        const int op = timer_->begin();
        const double cpu_start = cpu_clock ? thread_cpu_seconds() : 0;
        it->second->run();
        deferred.erase(it);
        timer_->end(op);
        timed.push_back(
            {TraceOpKind::Weight, s, i, cpu_clock ? 1e3 * (thread_cpu_seconds() - cpu_start) : 0});
        if (after_backward_) after_backward_(s, i);
        if (on_backward_) on_backward_(s, i);
        break;
      }
      case InstrKind::HandGrad:
        delivered[{true, s, i}] = take(produced, {true, s, i}, instr, "the gradient");
        break;
      case InstrKind::SendGrad: {
        const torch::Tensor grad = take(produced, {true, s, i}, instr, "the gradient");
        transport_.post_send(instr.peer, key_of(instr), grad);
        if (trace)
          trace->sent(TraceTransferKind::Gradient, s, i, instr.peer, bytes_of(grad),
                      trace->now_ms());
        break;
      }
      case InstrKind::OptimizerStep:
        if (!optimizer_step_)
          throw Error(ErrorKind::Internal, "", "program",
                      plan::to_string(instr) + ": the program steps optimizers but none is set");
        optimizer_step_(s, i);
        break;
    }
    for (int b : free_after[k]) {
      live_bytes -= buffers[b].bytes;
      live.erase(b);
    }
    for (int x : complete_after[k]) transport_.wait_send(list[x].peer, key_of(list[x]));
    losses.read_computed();
    if (metered) {
      const std::int64_t held = meter.interval_peak();
      if (held > memory_peak_.bytes) memory_peak_ = {held, plan::to_string(instr)};
    }
  }
  transport_.wait_sends();
  if (!deferred.empty())
    throw Error(ErrorKind::Internal, "", "program",
                "the W of stage " + std::to_string(deferred.begin()->first.first) +
                    ", micro-batch " + std::to_string(deferred.begin()->first.second) +
                    " never ran");
  const StepLoss loss = losses.finish();
  if (train) {
    arena_use_ = use;
    unsettled_ops_ = std::move(timed);
    // A traced run's ops go to the trace now, with their times (which waits for the device).
    if (trace) settle_stage_times(trace);
  }
  return loss;
}

// A buffer for the message of a receive: at its offset in the arena, or its own allocation.
torch::Tensor madpipe::runtime::PipelineExecutor::receive_buffer(
    const plan::Instr& instr, const plan::ReceiveBuffer& buffer) {
  const auto& shape = output_shapes_.at(instr.stage);
  const torch::Dtype dtype = output_dtypes_.at(instr.stage);
  const auto options = torch::TensorOptions().dtype(dtype).device(device_);
  if (buffer.offset < 0) return torch::empty(shape, options);
  const std::int64_t bytes = message_bytes_.at(instr.stage);
  if (bytes > buffer.bytes)
    throw Error(ErrorKind::Internal, "", "program",
                plan::to_string(instr) + ": a buffer of " + std::to_string(buffer.bytes) +
                    " bytes for a message of " + std::to_string(bytes));
  return arena_.narrow(0, buffer.offset, bytes).view(dtype).view(shape);
}

madpipe::runtime::StepLoss madpipe::runtime::run_unsplit(ChainModel& model, int micro_batches,
                                                         const std::function<Batch(int)>& batch_of,
                                                         const RandomKeyOf& key_of) {
  StepLoss loss;
  for (int i = 0; i < micro_batches; ++i) {
    const Batch b = batch_of(i);
    torch::Tensor x = b.input;
    for (int l = 0; l < model.size(); ++l) {
      if (key_of) seed_layer_forward(key_of(i), l, x.device());
      x = model.layers[l].forward(x);
    }
    torch::Tensor value = model.loss(x, b.target);
    loss.sum += value.item<double>();
    ++loss.count;
    (value / micro_batches).backward();
  }
  return loss;
}
