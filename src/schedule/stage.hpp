#pragma once

#include "core/chain.hpp"
#include "core/names.hpp"
#include "core/platform.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe::schedule {

// What a stage recomputes in its backward (a plan's remat.strategy: `--remat`) and where it keeps
// activations between its forward and its backward (offload.strategy: `--offload`).
enum class RematStrategy { None, Rotor };
inline constexpr Named<RematStrategy> kRematStrategyNames[] = {{RematStrategy::None, "none"},
                                                               {RematStrategy::Rotor, "rotor"}};
enum class OffloadStrategy { None, Host };
inline constexpr Named<OffloadStrategy> kOffloadStrategyNames[] = {{OffloadStrategy::None, "none"},
                                                                   {OffloadStrategy::Host, "host"}};

// A tied weight (the profile's tied_weights) that a stage's layers use: group is its index in
// the profile's list. A GPU holds it once, however many of its stages use it.
struct SharedWeight {
  int group = 0;
  std::int64_t bytes = 0;
};
inline bool operator==(const SharedWeight& a, const SharedWeight& b) {
  return a.group == b.group && a.bytes == b.bytes;
}

// A contiguous range of layers placed on one GPU, with its effective costs (FORMATS.md, "stages").
struct Stage {
  int id = 0;
  int first_layer = 0;
  int last_layer = 0;
  int gpu = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  std::int64_t weight_bytes = 0;
  std::int64_t stored_bytes = 0;     // memory one in-flight micro-batch occupies
  std::int64_t output_bytes = 0;     // a_{last_layer}, sent to the next stage
  std::int64_t workspace_bytes = 0;  // largest transient workspace of its layers
  RematStrategy remat = RematStrategy::None;
  OffloadStrategy offload = OffloadStrategy::None;
  // With remat or offload: the stage's operation sequence (remat_sequence.hpp text form), whose
  // replay gives its times and memory. Empty: plain forward and backward.
  std::string sequence;

  // A split backward (zero-bubble): B computes the input gradient in backward_ms -
  // backward_weight_ms, a W op the weight gradient in backward_weight_ms, and weight_kept_bytes
  // of each micro-batch stay from the end of B to the end of W. 0: B is the whole backward.
  double backward_weight_ms = 0;
  std::int64_t weight_kept_bytes = 0;
  // The tied weights its layers use, counted in weight_bytes (once each), by ascending group.
  std::vector<SharedWeight> shared_weights;

  double compute_ms() const noexcept { return forward_ms + backward_ms; }
  // Whether the stage recomputes or offloads, running its sequence.
  bool uses_sequence() const noexcept {
    return remat != RematStrategy::None || offload != OffloadStrategy::None;
  }
  bool splits_backward() const noexcept { return backward_weight_ms > 0; }
  double backward_input_ms() const noexcept { return backward_ms - backward_weight_ms; }
};

bool operator==(const Stage& a, const Stage& b);

Stage make_stage(const ChainCosts& costs, int id, int first_layer, int last_layer, int gpu);

// The stage as it runs with its backward whole (W folded into B), or split as the profile splits
// its layers (whole where they do not split).
Stage with_whole_backward(Stage stage);
Stage with_split_backward(const ChainCosts& costs, Stage stage);

// Whether the stage may run its backward split: it neither rematerializes nor offloads, and its
// layers' profile splits their backward.
bool can_split_backward(const ChainCosts& costs, const Stage& stage);

// Stages from the index of the first layer of each stage (ascending, starting at 0) and the GPU
// of each stage.
std::vector<Stage> make_stages(const ChainCosts& costs, const std::vector<int>& first_layers,
                               const std::vector<int>& gpus);

// True when every GPU holds at most one stage.
bool is_contiguous_allocation(const std::vector<Stage>& stages);

// Time to send `bytes` from GPU `from_gpu` to GPU `to_gpu` over their link: at
// bandwidth_bytes_per_ms within a node, at the inter-node bandwidth between nodes. 0 when the
// bandwidth is infinite (0 means "not set" and is rejected by readers).
double transfer_ms(std::int64_t bytes, const Platform& platform, int from_gpu, int to_gpu);

// Time to send `bytes` over the slowest link of the platform: for planners that decide stage
// boundaries before they know which GPUs a boundary links (conservative on multi-node
// platforms). With uniform links, the time over any link.
double transfer_ms(std::int64_t bytes, const Platform& platform);

}  // namespace madpipe::schedule
