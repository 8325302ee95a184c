#include "runtime/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

static double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

static std::int64_t bytes_of(const torch::Tensor& t) {
  return static_cast<std::int64_t>(t.numel()) * static_cast<std::int64_t>(t.element_size());
}

madpipe::Profile madpipe::runtime::profile_model(ChainModel& model, const Batch& sample,
                                                 const std::string& name, int repeats) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  Profile profile;
  profile.name = name;
  profile.device = "cpu";
  profile.dtype = "float32";
  profile.batch = static_cast<int>(sample.input.size(0));
  profile.input_bytes = bytes_of(sample.input);
  torch::Tensor x = sample.input;
  const int n = static_cast<int>(model.layers.size());
  for (int l = 0; l < n; ++l) {
    const bool last = l == n - 1;
    auto run_forward = [&]() {
      torch::Tensor input = l == 0 ? x : x.detach().requires_grad_(true);
      torch::Tensor y = model.layers[l].forward(input);
      return last ? model.loss(y, sample.target) : y;
    };
    std::vector<double> forward_ms, backward_ms;
    for (int r = 0; r <= repeats; ++r) {  // the first run warms up
      const auto f0 = Clock::now();
      torch::Tensor y = run_forward();
      const double f = ms_since(f0);
      torch::Tensor grad = torch::ones_like(y);
      const auto b0 = Clock::now();
      y.backward(grad);
      const double b = ms_since(b0);
      if (r > 0) {
        forward_ms.push_back(f);
        backward_ms.push_back(b);
      }
    }
    for (auto& p : model.layers[l].ptr()->parameters()) p.mutable_grad() = torch::Tensor();
    Layer layer;
    layer.name = model.names[l];
    layer.forward_ms = median(forward_ms);
    layer.backward_ms = median(backward_ms);
    for (const auto& p : model.layers[l].ptr()->parameters()) layer.weight_bytes += bytes_of(p);
    for (const auto& b : model.layers[l].ptr()->buffers()) layer.weight_bytes += bytes_of(b);
    torch::NoGradGuard no_grad;
    torch::Tensor y = model.layers[l].forward(x);
    layer.output_bytes = last ? 4 : bytes_of(y);
    profile.layers.push_back(layer);
    x = y;
  }
  return profile;
}
