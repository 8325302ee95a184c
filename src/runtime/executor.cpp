#include "runtime/executor.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <chrono>
#include <map>

using madpipe::plan::Instr;
using madpipe::plan::InstrKind;
using madpipe::plan::TraceOpKind;
using madpipe::plan::TraceTransferKind;

static double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

static std::int64_t bytes_of(const torch::Tensor& t) {
  return static_cast<std::int64_t>(t.numel()) * t.element_size();
}

madpipe::runtime::LayerOutputs madpipe::runtime::probe_layer_outputs(ChainModel& model,
                                                                     const Batch& sample) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers, saved;
  for (const auto& layer : model.layers)
    for (const torch::Tensor& b : layer.ptr()->buffers()) {
      buffers.push_back(b);
      saved.push_back(b.clone());
    }
  LayerOutputs outputs;
  torch::Tensor x = sample.input;
  for (auto& layer : model.layers) {
    x = layer.forward(x);
    outputs.shapes.push_back(x.sizes().vec());
    outputs.dtypes.push_back(x.scalar_type());
    outputs.device = x.device();
  }
  for (std::size_t b = 0; b < buffers.size(); ++b) buffers[b].copy_(saved[b]);
  return outputs;
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
  stage_times_.resize(plan.stages.size());
  device_ = outputs.device;
}

void madpipe::runtime::PipelineExecutor::reset_stage_times() {
  stage_times_.assign(plan_.stages.size(), StageTime{});
}

std::vector<int> madpipe::runtime::PipelineExecutor::local_stages() const {
  std::vector<int> out;
  for (const schedule::Stage& stage : plan_.stages)
    if (stage.gpu == rank_) out.push_back(stage.id);
  return out;
}

std::vector<torch::Tensor> madpipe::runtime::PipelineExecutor::stage_parameters(int stage,
                                                                                int copy) const {
  const ChainModel& model = copy == 1 && second_ ? *second_ : model_;
  return model.parameters(plan_.stages[stage].first_layer, plan_.stages[stage].last_layer);
}

void madpipe::runtime::PipelineExecutor::use_two_weight_copies(
    ChainModel& second, int update_micro_batches, std::function<int(int, int)> copy_of,
    std::function<void(int, int)> after_backward) {
  second_ = &second;
  update_micro_batches_ = update_micro_batches;
  copy_of_ = std::move(copy_of);
  after_backward_ = std::move(after_backward);
}

torch::Tensor madpipe::runtime::PipelineExecutor::forward_stage(int stage, torch::Tensor input,
                                                                int copy) {
  ChainModel& model = model_of(copy);
  for (int l = plan_.stages[stage].first_layer; l <= plan_.stages[stage].last_layer; ++l)
    input = model.layers[l].forward(input);
  return input;
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::run(
    const plan::Program& program, const std::function<Batch(int)>& batch_of) {
  return execute(program, batch_of, true);
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::evaluate(
    const plan::Program& program, const std::function<Batch(int)>& batch_of) {
  torch::NoGradGuard no_grad;
  return execute(program, batch_of, false);
}

madpipe::runtime::StepLoss madpipe::runtime::PipelineExecutor::execute(
    const plan::Program& program, const std::function<Batch(int)>& batch_of, bool train) {
  const int num_stages = static_cast<int>(plan_.stages.size());
  const int n = program.micro_batches;
  const std::vector<Instr>& list = program.per_gpu.at(rank_);
  auto gpu_of = [&](int s) { return plan_.stages[s].gpu; };
  auto post_receive = [&](const Instr& instr, torch::Tensor buffer) {
    const bool act = instr.kind == InstrKind::RecvAct;
    transport_.post_recv(
        instr.peer,
        {act ? Direction::Activation : Direction::Gradient, instr.stage, instr.micro_batch},
        std::move(buffer));
  };
  // Receives are posted ahead of their use (Arena) or all at the start of the step (Upfront):
  // either way data lands while earlier instructions compute.
  const plan::ReceivePlan* receives = nullptr;
  std::vector<std::vector<int>> post_before(list.size()), free_after(list.size());
  if (receives_ == Receives::Arena) {
    receives = &receive_plan(list, train);
    if (receives->placed() && (!arena_.defined() || arena_.numel() < receives->arena_bytes()))
      arena_ = torch::empty({receives->arena_bytes()},
                            torch::TensorOptions().dtype(torch::kUInt8).device(device_));
    for (int j = 0; j < static_cast<int>(receives->slots.size()); ++j) {
      post_before[receives->slots[j].post_before].push_back(j);
      free_after[receives->slots[j].last_use].push_back(j);
    }
  } else {
    for (const Instr& instr : list)
      if (instr.kind == InstrKind::RecvAct || (train && instr.kind == InstrKind::RecvGrad))
        post_receive(instr, receive_buffer(instr.stage, -1));
  }
  ArenaUse use;
  std::map<int, const plan::ReceiveSlot*> live;  // by slot index
  std::int64_t live_bytes = 0;
  if (receives) {
    use.planned_bytes = receives->arena_bytes();
    use.buffers = static_cast<int>(receives->slots.size());
    for (const auto& slot : receives->slots) use.sum_bytes += slot.bytes;
  }
  auto post_planned = [&](int j) {
    const plan::ReceiveSlot& slot = receives->slots[j];
    if (slot.offset >= 0)
      for (const auto& [other, placed] : live)
        if (slot.offset < placed->offset + placed->bytes &&
            placed->offset < slot.offset + slot.bytes)
          throw Error(ErrorKind::Internal, "", "receive arena",
                      "the buffer of " + plan::to_string(list[slot.instr]) +
                          " overlaps the live buffer of " + plan::to_string(list[placed->instr]));
    live.emplace(j, &slot);
    live_bytes += slot.bytes;
    use.peak_live_bytes = std::max(use.peak_live_bytes, live_bytes);
    if (slot.offset >= 0)
      use.high_water_bytes = std::max(use.high_water_bytes, slot.offset + slot.bytes);
    post_receive(list[slot.instr], receive_buffer(list[slot.instr].stage, slot.offset));
  };
  struct Slot {
    torch::Tensor input;               // leaf whose gradient goes to the previous stage
    torch::Tensor output;              // stage output (or the scaled loss on the last stage)
    std::unique_ptr<SequenceRun> run;  // a stage with a sequence: what its forward part kept
  };
  std::map<std::pair<int, int>, Slot> slots;              // (stage, micro-batch)
  std::map<std::pair<int, int>, torch::Tensor> handover;  // activations between local stages
  std::map<std::pair<int, int>, torch::Tensor> grads;     // gradients for the previous stage
  std::map<int, Batch> batches;
  auto batch = [&](int i) -> const Batch& {
    auto it = batches.find(i);
    if (it == batches.end()) it = batches.emplace(i, batch_of(i)).first;
    return it->second;
  };
  TraceRecorder* const trace = train && recorder_ && recorder_->recording() ? recorder_ : nullptr;
  StepLoss loss;
  for (std::size_t k = 0; k < list.size(); ++k) {
    for (int j : post_before[k]) post_planned(j);
    const Instr& instr = list[k];
    const int s = instr.stage, i = instr.micro_batch;
    const bool last = s == num_stages - 1;
    switch (instr.kind) {
      case InstrKind::Forward: {
        torch::Tensor input;
        if (s == 0) {
          input = batch(i).input;
        } else if (gpu_of(s - 1) == rank_) {
          input = handover.at({s - 1, i});
          handover.erase({s - 1, i});
        } else {
          input = transport_.wait_recv(gpu_of(s - 1), {Direction::Activation, s - 1, i});
          if (trace)
            trace->received(TraceTransferKind::Activation, s - 1, i, gpu_of(s - 1),
                            trace->now_ms());
        }
        const auto clock_start = std::chrono::steady_clock::now();
        const double started = trace ? trace->now_ms() : 0;
        // The loss of the last stage, divided so that accumulated gradients are the batch's.
        auto scaled_loss = [&](const torch::Tensor& output) {
          torch::Tensor value = model_.loss(output, batch(i).target);
          const double item = value.item<double>();
          loss.sum += item;
          ++loss.count;
          if (on_loss_) on_loss_(i, item);
          // Synchronous: the step's gradient is the mean over its micro-batches. 2BW divides by
          // the micro-batches of one update instead (the trainer's scale).
          return value / (copy_of_ ? update_micro_batches_ : n);
        };
        const int copy = copy_of_ ? copy_of_(s, i) : 0;
        Slot slot;
        if (train && sequences_[s]) {
          // A recomputation in the backward part uses this micro-batch's weight copy (kept in the
          // run), whatever copy_of would say then.
          slot.run = sequences_[s]->forward(
              model_of(copy), input, s > 0,
              last ? StageSequence::LossFn(scaled_loss) : StageSequence::LossFn());
          slot.output = slot.run->output;
        } else {
          if (s > 0 && train) input = input.detach().requires_grad_(true);
          slot.input = input;
          slot.output = forward_stage(s, input, copy);
          if (last) slot.output = scaled_loss(slot.output);
        }
        const double took = ms_since(clock_start);
        if (train) {
          stage_times_[s].forward_ms += took;
          ++stage_times_[s].forwards;
        }
        if (trace) trace->op(TraceOpKind::Forward, s, i, started, started + took);
        if (last) {
          batches.erase(i);
        } else if (gpu_of(s + 1) == rank_) {
          handover[{s, i}] = slot.output.detach();
        }
        if (s == 0 && !last) batches.erase(i);
        if (train)
          slots[{s, i}] = std::move(slot);
        else if (gpu_of(std::min(s + 1, num_stages - 1)) != rank_)
          slots[{s, i}] = Slot{{}, slot.output, nullptr};
        break;
      }
      case InstrKind::SendAct: {
        auto it = slots.find({s, i});
        transport_.post_send(instr.peer, {Direction::Activation, s, i}, it->second.output);
        if (trace)
          trace->sent(TraceTransferKind::Activation, s, i, instr.peer, bytes_of(it->second.output),
                      trace->now_ms());
        if (!train) slots.erase(it);
        break;
      }
      case InstrKind::Backward: {
        if (!train) break;
        Slot slot = std::move(slots.at({s, i}));
        slots.erase({s, i});
        // The gradient from the next stage (none on the last), before the backward starts.
        torch::Tensor grad;
        if (!last && gpu_of(s + 1) == rank_) {
          grad = grads.at({s, i});
          grads.erase({s, i});
        } else if (!last) {
          grad = transport_.wait_recv(gpu_of(s + 1), {Direction::Gradient, s, i});
          if (trace)
            trace->received(TraceTransferKind::Gradient, s, i, gpu_of(s + 1), trace->now_ms());
        }
        const auto clock_start = std::chrono::steady_clock::now();
        const double started = trace ? trace->now_ms() : 0;
        if (slot.run) {
          torch::Tensor delta = sequences_[s]->backward(
              *slot.run, last ? StageSequence::GradientFn()
                              : StageSequence::GradientFn([&grad]() { return grad; }));
          slot.run.reset();
          if (s > 0) grads[{s - 1, i}] = delta;
        } else {
          if (last) {
            slot.output.backward();
          } else {
            slot.output.backward(grad);
          }
          if (s > 0) grads[{s - 1, i}] = slot.input.grad();
        }
        const double took = ms_since(clock_start);
        stage_times_[s].backward_ms += took;
        ++stage_times_[s].backwards;
        if (trace) trace->op(TraceOpKind::Backward, s, i, started, started + took);
        if (after_backward_) after_backward_(s, i);
        if (on_backward_) on_backward_(s, i);
        break;
      }
      case InstrKind::SendGrad: {
        if (!train) break;
        auto it = grads.find({s, i});
        transport_.post_send(instr.peer, {Direction::Gradient, s, i}, it->second);
        if (trace)
          trace->sent(TraceTransferKind::Gradient, s, i, instr.peer, bytes_of(it->second),
                      trace->now_ms());
        grads.erase(it);
        break;
      }
      case InstrKind::RecvAct:
      case InstrKind::RecvGrad:
      case InstrKind::OptimizerStep:
        break;  // receives are posted ahead (post_before); the caller steps the optimizers
    }
    for (int j : free_after[k]) {
      live_bytes -= receives->slots[j].bytes;
      live.erase(j);
    }
  }
  transport_.wait_sends();
  if (train && receives) arena_use_ = use;
  return loss;
}

void madpipe::runtime::PipelineExecutor::receive_buffers(Receives mode, int lookahead) {
  if (lookahead < 0)
    throw Error(ErrorKind::InvalidInput, "", "receive-lookahead",
                "must be >= 0, got " + std::to_string(lookahead));
  receives_ = mode;
  lookahead_ = lookahead;
  receive_plans_.clear();
}

const madpipe::plan::ReceivePlan& madpipe::runtime::PipelineExecutor::receive_plan(
    const std::vector<Instr>& list, bool train) {
  for (const PlannedReceives& planned : receive_plans_)
    if (planned.train == train && planned.list == list) return planned.plan;
  std::vector<std::int64_t> message_bytes;
  for (std::size_t s = 0; s < output_shapes_.size(); ++s) {
    std::int64_t numel = 1;
    for (std::int64_t d : output_shapes_[s]) numel *= d;
    message_bytes.push_back(numel * static_cast<std::int64_t>(c10::elementSize(output_dtypes_[s])));
  }
  receive_plans_.push_back(
      {list, train, plan::plan_receives(list, message_bytes, train, lookahead_)});
  return receive_plans_.back().plan;
}

// A buffer for stage `stage`'s output: at `offset` in the arena, or its own allocation (-1).
torch::Tensor madpipe::runtime::PipelineExecutor::receive_buffer(int stage, std::int64_t offset) {
  const auto options = torch::TensorOptions().dtype(output_dtypes_[stage]).device(device_);
  if (offset < 0) return torch::empty(output_shapes_[stage], options);
  std::int64_t numel = 1;
  for (std::int64_t d : output_shapes_[stage]) numel *= d;
  const std::int64_t bytes =
      numel * static_cast<std::int64_t>(c10::elementSize(output_dtypes_[stage]));
  return arena_.narrow(0, offset, bytes).view(output_dtypes_[stage]).view(output_shapes_[stage]);
}

madpipe::runtime::StepLoss madpipe::runtime::run_unsplit(
    ChainModel& model, int micro_batches, const std::function<Batch(int)>& batch_of) {
  StepLoss loss;
  for (int i = 0; i < micro_batches; ++i) {
    const Batch b = batch_of(i);
    torch::Tensor x = b.input;
    for (auto& layer : model.layers) x = layer.forward(x);
    torch::Tensor value = model.loss(x, b.target);
    loss.sum += value.item<double>();
    ++loss.count;
    (value / micro_batches).backward();
  }
  return loss;
}
