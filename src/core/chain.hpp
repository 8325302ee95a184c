#pragma once

#include "core/profile.hpp"

#include <cstdint>
#include <vector>

namespace madpipe {

// Range sums over a profile's layers in O(1), the quantities of thesis Part III. Layers are
// numbered from 0; a range [first, last] is inclusive.
class ChainCosts {
 public:
  explicit ChainCosts(const Profile& profile);

  int num_layers() const noexcept { return static_cast<int>(forward_prefix_.size()) - 1; }
  double forward_ms(int first, int last) const noexcept;
  double backward_ms(int first, int last) const noexcept;
  double compute_ms(int first, int last) const noexcept;  // U(first, last)
  // The part of backward_ms that a split backward defers to W (profile backward_weight_ms; 0 for
  // layers without a split), and what those layers keep from I until W.
  double backward_weight_ms(int first, int last) const noexcept;
  std::int64_t weight_kept_bytes(int first, int last) const noexcept;
  bool has_split_backward() const noexcept { return backward_weight_prefix_.back() > 0; }
  // The range's weights, a weight that several of its layers share (tied_weights) counted once.
  std::int64_t weight_bytes(int first, int last) const noexcept;
  const std::vector<TiedWeight>& tied_weights() const noexcept { return tied_weights_; }
  // Indices into tied_weights() of the groups with a layer in the range.
  std::vector<int> tied_groups_in(int first, int last) const;
  // Memory one in-flight micro-batch occupies: inputs of the layers plus their saved_bytes.
  std::int64_t stored_bytes(int first, int last) const noexcept;
  // Largest transient workspace of any layer in the range, in O(1).
  std::int64_t workspace_bytes(int first, int last) const noexcept;
  // Layer l's transient workspace during its forward, and during its backward.
  std::int64_t forward_workspace_bytes(int layer) const noexcept {
    return forward_workspace_[layer];
  }
  std::int64_t backward_workspace_bytes(int layer) const noexcept {
    return backward_workspace_[layer];
  }
  // a_l: output of layer l; a_{-1} is the network input.
  std::int64_t activation_bytes(int layer) const noexcept;
  double total_compute_ms() const noexcept { return compute_ms(0, num_layers() - 1); }
  double max_layer_compute_ms() const noexcept { return max_layer_ms_; }

 private:
  std::vector<double> forward_prefix_, backward_prefix_, backward_weight_prefix_;
  std::vector<std::int64_t> weight_prefix_, stored_prefix_, kept_prefix_;
  std::vector<std::int64_t> output_bytes_;  // index l+1 holds a_l; index 0 holds a_{-1}
  // workspace_max_[k][l]: largest workspace of layers l .. l + 2^k - 1 (a sparse table).
  std::vector<std::vector<std::int64_t>> workspace_max_;
  std::vector<std::int64_t> forward_workspace_, backward_workspace_;
  double max_layer_ms_ = 0;
  std::vector<TiedWeight> tied_weights_;
};

// How many of the group's layers lie in [first, last].
int layers_in(const TiedWeight& group, int first, int last);

}  // namespace madpipe
