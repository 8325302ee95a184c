#include "partition/tied_placement.hpp"

#include "partition/madpipe_dp.hpp"

#include <algorithm>
#include <limits>
#include <optional>

namespace {

// Layer l of the chain as a profile layer (the sums of ChainCosts over [l, l]).
madpipe::Layer layer_of(const madpipe::ChainCosts& costs, int l) {
  madpipe::Layer layer;
  layer.name = std::to_string(l);
  layer.forward_ms = costs.forward_ms(l, l);
  layer.backward_ms = costs.backward_ms(l, l);
  layer.weight_bytes = costs.weight_bytes(l, l);
  layer.output_bytes = costs.activation_bytes(l);
  layer.saved_bytes = costs.stored_bytes(l, l) - costs.activation_bytes(l - 1);
  layer.forward_workspace_bytes = costs.forward_workspace_bytes(l);
  layer.backward_workspace_bytes = costs.backward_workspace_bytes(l);
  if (costs.backward_weight_ms(l, l) > 0) {
    madpipe::SplitBackward split;
    split.weight_ms = costs.backward_weight_ms(l, l);
    split.input_ms = layer.backward_ms - split.weight_ms;
    split.kept_bytes = costs.weight_kept_bytes(l, l);
    layer.split_backward = split;
  }
  return layer;
}

// Layers 0 .. tail - 1 of the chain, layer `host` also carrying the costs of layers tail .. L-1
// (which share `shared_bytes` of weights with it): what the GPU of `host` runs when the tail is
// placed there.
madpipe::Profile chain_with_tail_on(const madpipe::ChainCosts& costs, int host, int tail,
                                    std::int64_t shared_bytes) {
  const int last = costs.num_layers() - 1;
  madpipe::Profile profile;
  profile.input_bytes = costs.activation_bytes(-1);
  for (int l = 0; l < tail; ++l) profile.layers.push_back(layer_of(costs, l));
  madpipe::Layer& merged = profile.layers[host];
  merged.forward_ms += costs.forward_ms(tail, last);
  const double weight_ms = costs.backward_weight_ms(tail, last);
  madpipe::set_backward_ms(merged, merged.backward_ms + costs.backward_ms(tail, last));
  if (weight_ms > 0 || merged.split_backward) {
    madpipe::SplitBackward split = merged.split_backward.value_or(madpipe::SplitBackward{});
    split.weight_ms = costs.backward_weight_ms(host, host) + weight_ms;
    split.input_ms = merged.backward_ms - split.weight_ms;
    split.kept_bytes = costs.weight_kept_bytes(host, host) + costs.weight_kept_bytes(tail, last);
    merged.split_backward = split;
  }
  merged.weight_bytes += costs.weight_bytes(tail, last) - shared_bytes;
  merged.saved_bytes += costs.stored_bytes(tail, last);
  merged.forward_workspace_bytes =
      std::max(merged.forward_workspace_bytes, costs.workspace_bytes(tail, last));
  merged.backward_workspace_bytes =
      std::max(merged.backward_workspace_bytes, costs.workspace_bytes(tail, last));
  return profile;
}

}  // namespace

std::vector<madpipe::partition::Allocation> madpipe::partition::tied_together_allocations(
    const ChainCosts& costs, const Platform& platform, const Discretization& discretization,
    const std::function<bool()>& out_of_time) {
  std::vector<Allocation> out;
  for (const TiedWeight& group : costs.tied_weights()) {
    const int host = group.layers.front();
    const int tail = group.layers.back();
    if (out_of_time && out_of_time()) break;
    const ChainCosts merged(chain_with_tail_on(costs, host, tail, group.bytes));
    const DpCandidates found =
        dp_candidates(merged, platform, discretization, false, {},
                      std::numeric_limits<double>::infinity(), nullptr, out_of_time);
    for (Allocation allocation : found.allocations) {
      const std::size_t stage = static_cast<std::size_t>(
          std::upper_bound(allocation.first_layers.begin(), allocation.first_layers.end(), host) -
          allocation.first_layers.begin() - 1);
      if (stage + 1 < allocation.first_layers.size()) {  // else the host's stage ends the chain
        allocation.gpus.push_back(allocation.gpus[stage]);
        allocation.first_layers.push_back(tail);
      }
      allocation.remat.clear();  // planned plainly; the ranges changed
      if (std::find(out.begin(), out.end(), allocation) == out.end())
        out.push_back(std::move(allocation));
    }
  }
  return out;
}
