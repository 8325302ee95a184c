#include "core/chain.hpp"

#include <algorithm>
#include <utility>

madpipe::ChainCosts::ChainCosts(const Profile& profile) {
  const std::size_t n = profile.layers.size();
  forward_prefix_.assign(n + 1, 0.0);
  backward_prefix_.assign(n + 1, 0.0);
  backward_weight_prefix_.assign(n + 1, 0.0);
  kept_prefix_.assign(n + 1, 0);
  weight_prefix_.assign(n + 1, 0);
  stored_prefix_.assign(n + 1, 0);
  output_bytes_.assign(n + 1, 0);
  std::vector<std::int64_t> workspace(n, 0);
  forward_workspace_.assign(n, 0);
  backward_workspace_.assign(n, 0);
  output_bytes_[0] = profile.input_bytes;
  for (std::size_t l = 0; l < n; ++l) {
    const Layer& layer = profile.layers[l];
    forward_prefix_[l + 1] = forward_prefix_[l] + layer.forward_ms;
    backward_prefix_[l + 1] = backward_prefix_[l] + layer.backward_ms;
    weight_prefix_[l + 1] = weight_prefix_[l] + layer.weight_bytes;
    const SplitBackward split = layer.split_backward.value_or(SplitBackward{});
    backward_weight_prefix_[l + 1] = backward_weight_prefix_[l] + split.weight_ms;
    kept_prefix_[l + 1] = kept_prefix_[l] + split.kept_bytes;
    stored_prefix_[l + 1] = stored_prefix_[l] + output_bytes_[l] + layer.saved_bytes;
    output_bytes_[l + 1] = layer.output_bytes;
    workspace[l] = std::max(layer.forward_workspace_bytes, layer.backward_workspace_bytes);
    forward_workspace_[l] = layer.forward_workspace_bytes;
    backward_workspace_[l] = layer.backward_workspace_bytes;
    max_layer_ms_ = std::max(max_layer_ms_, layer.forward_ms + layer.backward_ms);
  }
  tied_weights_ = profile.tied_weights;
  workspace_max_.push_back(std::move(workspace));
  for (std::size_t width = 2; width <= n; width *= 2) {
    const std::vector<std::int64_t>& half = workspace_max_.back();
    std::vector<std::int64_t> level(n - width + 1);
    for (std::size_t l = 0; l < level.size(); ++l)
      level[l] = std::max(half[l], half[l + width / 2]);
    workspace_max_.push_back(std::move(level));
  }
}

double madpipe::ChainCosts::forward_ms(int first, int last) const noexcept {
  return forward_prefix_[last + 1] - forward_prefix_[first];
}

double madpipe::ChainCosts::backward_ms(int first, int last) const noexcept {
  return backward_prefix_[last + 1] - backward_prefix_[first];
}

double madpipe::ChainCosts::compute_ms(int first, int last) const noexcept {
  return forward_ms(first, last) + backward_ms(first, last);
}

double madpipe::ChainCosts::backward_weight_ms(int first, int last) const noexcept {
  return backward_weight_prefix_[last + 1] - backward_weight_prefix_[first];
}

std::int64_t madpipe::ChainCosts::weight_kept_bytes(int first, int last) const noexcept {
  return kept_prefix_[last + 1] - kept_prefix_[first];
}

std::int64_t madpipe::ChainCosts::weight_bytes(int first, int last) const noexcept {
  std::int64_t bytes = weight_prefix_[last + 1] - weight_prefix_[first];
  for (const TiedWeight& group : tied_weights_) {
    const int count = layers_in(group, first, last);
    if (count > 1) bytes -= (count - 1) * group.bytes;
  }
  return bytes;
}

std::vector<int> madpipe::ChainCosts::tied_groups_in(int first, int last) const {
  std::vector<int> groups;
  for (std::size_t g = 0; g < tied_weights_.size(); ++g)
    if (layers_in(tied_weights_[g], first, last) > 0) groups.push_back(static_cast<int>(g));
  return groups;
}

int madpipe::layers_in(const TiedWeight& group, int first, int last) {
  return static_cast<int>(std::count_if(group.layers.begin(), group.layers.end(), [&](int layer) {
    return layer >= first && layer <= last;
  }));
}

std::int64_t madpipe::ChainCosts::stored_bytes(int first, int last) const noexcept {
  return stored_prefix_[last + 1] - stored_prefix_[first];
}

std::int64_t madpipe::ChainCosts::workspace_bytes(int first, int last) const noexcept {
  // Two blocks of 2^k layers cover the range: one from each end.
  int k = 0;
  while ((2 << k) <= last - first + 1) ++k;
  const std::vector<std::int64_t>& level = workspace_max_[k];
  return std::max(level[first], level[last + 1 - (1 << k)]);
}

std::int64_t madpipe::ChainCosts::activation_bytes(int layer) const noexcept {
  return output_bytes_[layer + 1];
}
