#include "runtime/profile/profiler.hpp"

#include "core/error.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/device/op_timer.hpp"
#include "runtime/model/saved_tensors.hpp"
#include "runtime/model/weight_gradients.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double relative_spread(const std::vector<double>& values) {
  const double middle = median(values);
  if (middle <= 0) return 0;
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  return (*high - *low) / middle;
}

std::int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? static_cast<std::int64_t>(t.numel()) * t.element_size() : 0;
}

std::string dtype_name(const torch::nn::Module& layer) {
  for (const auto& p : layer.parameters())
    if (p.is_floating_point()) {
      switch (p.scalar_type()) {
        case torch::kFloat:
          return "float32";
        case torch::kDouble:
          return "float64";
        case torch::kHalf:
          return "float16";
        case torch::kBFloat16:
          return "bfloat16";
        default:
          return c10::toString(p.scalar_type());
      }
    }
  return "";
}

std::string device_name(const torch::Device& device) {
  return device.is_cpu() ? "cpu" : device.str();
}

// One layer under measurement: its forward (with the loss on the last layer) on a fresh leaf of
// the incoming activation, and the backward of the result.
class LayerProbe {
 public:
  LayerProbe(madpipe::runtime::ChainModel& model, int layer, const torch::Tensor& input,
             const madpipe::runtime::Batch& sample, const torch::Device& device)
      : model_(model), layer_(layer), input_(input), sample_(sample), device_(device) {}

  bool last() const { return layer_ + 1 == static_cast<int>(model_.layers.size()); }

  torch::Tensor leaf() const {
    return layer_ == 0 || !input_.is_floating_point() ? input_
                                                      : input_.detach().requires_grad_(true);
  }

  torch::Tensor forward(const torch::Tensor& leaf) const {
    torch::Tensor y = model_.layers[layer_].forward(leaf);
    return last() ? model_.loss(y, sample_.target) : y;
  }

  void synchronize() const {
    if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
  }

  void clear_gradients() const {
    for (auto& p : model_.layers[layer_].ptr()->parameters()) p.mutable_grad() = torch::Tensor();
  }

 private:
  madpipe::runtime::ChainModel& model_;
  int layer_;
  const torch::Tensor& input_;
  const madpipe::runtime::Batch& sample_;
  torch::Device device_;
};

// Each forward and backward is timed by the device (CUDA events on a GPU: op_timer.hpp).
void time_layer(const LayerProbe& probe, const madpipe::runtime::ProfilerOptions& options,
                madpipe::runtime::OpTimer& timer, madpipe::Layer& layer,
                madpipe::runtime::LayerSpread& spread) {
  std::vector<double> forward_ms, backward_ms;
  for (int r = 0; r < options.warmup + options.repeats; ++r) {
    const torch::Tensor leaf = probe.leaf();
    timer.start_run(0);
    const int forward = timer.begin();
    torch::Tensor y = probe.forward(leaf);
    timer.end(forward);
    const torch::Tensor grad = torch::ones_like(y);
    const int backward = timer.begin();
    if (y.requires_grad()) y.backward(grad);
    timer.end(backward);
    const std::vector<madpipe::runtime::OpTimer::Span> spans = timer.finish_run();
    const double f = spans.at(0).end_ms - spans.at(0).start_ms;
    const double b = spans.at(1).end_ms - spans.at(1).start_ms;
    probe.clear_gradients();
    if (r >= options.warmup) {
      forward_ms.push_back(f);
      backward_ms.push_back(b);
    }
  }
  layer.forward_ms = median(forward_ms);
  layer.backward_ms = median(backward_ms);
  spread.forward = relative_spread(forward_ms);
  spread.backward = relative_spread(backward_ms);
}

// The layer's backward split into I (its input gradient, and the weight gradients of its parts
// that cannot wait) and W (the deferred weight gradients: weight_gradients.hpp), for a layer of
// which some part defers; the two median times are scaled to add up to the whole backward's, and
// the bytes kept from I until W are those the deferred gradients hold.
std::optional<madpipe::SplitBackward> time_split_layer(
    const LayerProbe& probe, const madpipe::runtime::ProfilerOptions& options,
    madpipe::runtime::OpTimer& timer, double backward_ms) {
  std::vector<double> input_ms, weight_ms;
  std::int64_t kept_bytes = 0;
  for (int r = 0; r < options.warmup + options.repeats; ++r) {
    const torch::Tensor leaf = probe.leaf();
    auto deferred = c10::make_intrusive<madpipe::runtime::DeferredWeightGradients>();
    torch::Tensor y;
    {
      const madpipe::runtime::DeferWeightGradients scope(deferred);
      y = probe.forward(leaf);
    }
    if (!y.requires_grad()) return std::nullopt;
    const torch::Tensor grad = torch::ones_like(y);
    timer.start_run(0);
    const int input = timer.begin();
    y.backward(grad);
    timer.end(input);
    if (deferred->empty()) {
      timer.finish_run();
      probe.clear_gradients();
      return std::nullopt;  // nothing in the layer defers
    }
    kept_bytes = deferred->kept_bytes();
    const int weight = timer.begin();
    deferred->run();
    timer.end(weight);
    const std::vector<madpipe::runtime::OpTimer::Span> spans = timer.finish_run();
    probe.clear_gradients();
    if (r >= options.warmup) {
      input_ms.push_back(spans.at(0).end_ms - spans.at(0).start_ms);
      weight_ms.push_back(spans.at(1).end_ms - spans.at(1).start_ms);
    }
  }
  const double i = median(input_ms), w = median(weight_ms);
  madpipe::Layer scaled;
  scaled.backward_ms = i + w;
  scaled.split_backward = madpipe::SplitBackward{i, w, kept_bytes};
  madpipe::set_backward_ms(scaled, backward_ms);
  return scaled.split_backward;
}

// What the device's libraries keep allocated from their first product on (cuBLAS and cuBLASLt
// workspaces on a GPU; nothing on the CPU): every later op runs with it there, so it is part of
// each layer's transient memory, and a plan that leaves it out overruns its memory on the device.
std::int64_t library_workspace_bytes(const torch::Device& device, torch::Dtype dtype,
                                     madpipe::runtime::MemoryMeter& meter) {
  if (!device.is_cuda()) return 0;
  torch::cuda::synchronize(device.index());
  const std::int64_t before = meter.current_bytes();
  {
    const auto options = torch::TensorOptions().device(device).dtype(dtype).requires_grad(true);
    const torch::Tensor x = torch::ones({64, 64}, options);
    const torch::Tensor w = torch::ones({64, 64}, options);
    const torch::Tensor b = torch::ones({64}, options);
    torch::nn::functional::linear(x, w, b).sum().backward();
    torch::matmul(x, w).sum().backward();
  }
  torch::cuda::synchronize(device.index());
  return std::max<std::int64_t>(0, meter.current_bytes() - before);
}

torch::Dtype floating_dtype(const torch::nn::Module& layer) {
  for (const auto& p : layer.parameters())
    if (p.is_floating_point()) return p.scalar_type();
  return torch::kFloat;
}

// Saved bytes and workspaces from the allocator's current and peak levels around one forward and
// one backward. Before the forward the input exists; what the forward leaves allocated is the
// output plus what autograd saved. The output's values are then released, as the runtime does
// once it has sent them (release_values): what stays is what the backward keeps, the output too
// where a node saved it (a ReLU or Tanh saves its result), so a stage holds it until its backward.
// What the backward adds is the input's gradient. The weight gradients exist already, as from a
// step's second micro-batch on: the backward then makes each as a temporary and adds it in,
// which is part of its workspace.
void measure_layer_memory(const LayerProbe& probe, madpipe::runtime::MemoryMeter& meter,
                          madpipe::Layer& layer) {
  probe.clear_gradients();
  {
    const torch::Tensor first = probe.forward(probe.leaf());
    if (first.requires_grad()) first.backward(torch::ones_like(first));
  }
  const torch::Tensor leaf = probe.leaf();
  probe.synchronize();
  const std::int64_t before_forward = meter.current_bytes();
  meter.reset_peak();
  torch::Tensor y = probe.forward(leaf);
  probe.synchronize();
  const std::int64_t after_forward = meter.current_bytes();
  layer.forward_workspace_bytes = std::max<std::int64_t>(0, meter.peak_bytes() - after_forward);
  const torch::Tensor grad = torch::ones_like(y);
  // The last layer's output is the loss, which nothing sends.
  const bool sent = !probe.last() && y.grad_fn() != nullptr;
  if (sent) madpipe::runtime::release_values(y);
  probe.synchronize();
  const std::int64_t kept = meter.current_bytes() - bytes_of(grad) - before_forward;
  layer.saved_bytes = std::max<std::int64_t>(0, sent ? kept : kept - bytes_of(y));
  probe.synchronize();
  const std::int64_t before_backward = meter.current_bytes();
  meter.reset_peak();
  if (sent)
    madpipe::runtime::backward_from(y, grad);
  else if (y.requires_grad())
    y.backward(grad);
  probe.synchronize();
  const std::int64_t results = bytes_of(leaf.requires_grad() ? leaf.grad() : torch::Tensor());
  layer.backward_workspace_bytes =
      std::max<std::int64_t>(0, meter.peak_bytes() - before_backward - results);
  probe.clear_gradients();
}
// The bytes of each tied parameter that layer l uses (read while the layer is materialized).
void record_tied_bytes(const madpipe::runtime::ChainModel& model, int l,
                       std::vector<std::int64_t>& tied_bytes) {
  for (std::size_t g = 0; g < model.tied_parameters.size(); ++g)
    for (const madpipe::runtime::TiedUse& use : model.tied_parameters[g])
      if (use.layer == l && tied_bytes[g] == 0) {
        const std::vector<torch::Tensor> parameters = model.layers[l].ptr()->parameters();
        if (use.index >= 0 && use.index < static_cast<int>(parameters.size()))
          tied_bytes[g] = bytes_of(parameters[static_cast<std::size_t>(use.index)]);
      }
}

// The model's tied parameters as the profile's tied_weights: one group per set of layers (the
// parameters that the same layers share add up). A layer in two different sets (never seen in
// practice) keeps only the first: the weight is then counted on each GPU, a bound.
std::vector<madpipe::TiedWeight> tied_weights_of(const madpipe::runtime::ChainModel& model,
                                                 const std::vector<std::int64_t>& tied_bytes) {
  std::vector<madpipe::TiedWeight> groups;
  for (std::size_t g = 0; g < model.tied_parameters.size(); ++g) {
    std::vector<int> layers;
    for (const madpipe::runtime::TiedUse& use : model.tied_parameters[g])
      if (std::find(layers.begin(), layers.end(), use.layer) == layers.end())
        layers.push_back(use.layer);
    std::sort(layers.begin(), layers.end());
    if (layers.size() < 2 || tied_bytes[g] <= 0) continue;
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const madpipe::TiedWeight& t) { return t.layers == layers; });
    if (same != groups.end()) {
      same->bytes += tied_bytes[g];
      continue;
    }
    const bool overlaps = std::any_of(groups.begin(), groups.end(), [&](const auto& t) {
      return std::any_of(layers.begin(), layers.end(), [&](int l) {
        return std::find(t.layers.begin(), t.layers.end(), l) != t.layers.end();
      });
    });
    if (!overlaps) groups.push_back(madpipe::TiedWeight{layers, tied_bytes[g]});
  }
  return groups;
}

}  // namespace

madpipe::runtime::ProfileMeasurement madpipe::runtime::profile_model(
    ChainModel& model, const Batch& sample, const std::string& name,
    const ProfilerOptions& options) {
  if (options.repeats < 1 || options.warmup < 0)
    throw Error(ErrorKind::InvalidInput, "", "repeats",
                "the profiler needs at least one timed run and a non-negative warm-up");
  if (options.device.is_cpu()) install_cpu_memory_counter();
  // The engine of every backward from now on, as in training: a later switch of engine would
  // start device threads whose library workspaces (cuBLAS) the profile has not measured.
  SavedTensorCollector::supported();
  MemoryMeter meter(options.device);
  const std::unique_ptr<OpTimer> timer = make_op_timer(options.device, options.clock);
  ProfileMeasurement out;
  out.memory_measured = meter.counting();
  Profile& profile = out.profile;
  profile.name = name;
  profile.device = device_name(options.device);
  profile.batch = static_cast<int>(sample.input.size(0));
  profile.input_bytes = bytes_of(sample.input);
  torch::Tensor x = sample.input;
  const int n = static_cast<int>(model.layers.size());
  std::int64_t library_bytes = -1;  // measured with the first layer, in its dtype
  std::vector<std::int64_t> tied_bytes(model.tied_parameters.size(), 0);
  for (int l = 0; l < n; ++l) {
    // A layer the model does not hold is built for its measurement and dropped after it.
    const bool borrowed = !model.holds(l);
    if (borrowed) model.materialize(l, options.device);
    if (borrowed && options.layer_dtype != torch::kFloat)
      model.layers[l].ptr()->to(options.layer_dtype);
    if (profile.dtype.empty()) profile.dtype = dtype_name(*model.layers[l].ptr());
    if (library_bytes < 0)
      library_bytes = out.memory_measured
                          ? library_workspace_bytes(options.device,
                                                    floating_dtype(*model.layers[l].ptr()), meter)
                          : 0;
    const LayerProbe probe(model, l, x, sample, options.device);
    Layer layer;
    layer.name = model.names[l];
    LayerSpread spread;
    time_layer(probe, options, *timer, layer, spread);
    layer.split_backward = time_split_layer(probe, options, *timer, layer.backward_ms);
    if (out.memory_measured) measure_layer_memory(probe, meter, layer);
    layer.forward_workspace_bytes += library_bytes;
    layer.backward_workspace_bytes += library_bytes;
    for (const auto& p : model.layers[l].ptr()->parameters()) layer.weight_bytes += bytes_of(p);
    for (const auto& b : model.layers[l].ptr()->buffers()) layer.weight_bytes += bytes_of(b);
    record_tied_bytes(model, l, tied_bytes);
    torch::NoGradGuard no_grad;
    torch::Tensor y = model.layers[l].forward(x);
    layer.output_bytes = probe.last() ? 4 : bytes_of(y);
    profile.layers.push_back(layer);
    out.spread.push_back(spread);
    x = y;
    if (borrowed) model.drop(l);
  }
  if (profile.dtype.empty()) profile.dtype = "float32";
  profile.tied_weights = tied_weights_of(model, tied_bytes);
  return out;
}
