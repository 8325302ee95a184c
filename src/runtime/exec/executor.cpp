#include "runtime/exec/executor.hpp"

#include "core/error.hpp"
#include "runtime/model/weight_gradients.hpp"

#include <optional>
#include <utility>

using madpipe::plan::TraceOpKind;

madpipe::runtime::LayerOutputs madpipe::runtime::probe_layer_outputs(ChainModel& model,
                                                                     const Batch& sample,
                                                                     torch::Dtype borrowed_dtype) {
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
      if (borrowed_dtype != torch::kFloat) model.layers[l].ptr()->to(borrowed_dtype);
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
  transport_.await_compute("for the last run's ops to finish (to time them)");
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

madpipe::runtime::StepLoss madpipe::runtime::run_unsplit(
    ChainModel& model, int micro_batches, const std::function<Batch(int)>& batch_of,
    const RandomKeyOf& key_of, const std::function<void()>& after_backward) {
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
    if (after_backward) after_backward();
  }
  return loss;
}
