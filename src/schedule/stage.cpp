#include "schedule/stage.hpp"

#include "core/error.hpp"

#include <set>
#include <tuple>
#include <utility>

bool madpipe::schedule::operator==(const Stage& a, const Stage& b) {
  return std::tie(a.id, a.first_layer, a.last_layer, a.gpu, a.forward_ms, a.backward_ms,
                  a.weight_bytes, a.stored_bytes, a.output_bytes, a.workspace_bytes, a.remat,
                  a.offload, a.sequence, a.backward_weight_ms, a.weight_kept_bytes,
                  a.shared_weights) ==
         std::tie(b.id, b.first_layer, b.last_layer, b.gpu, b.forward_ms, b.backward_ms,
                  b.weight_bytes, b.stored_bytes, b.output_bytes, b.workspace_bytes, b.remat,
                  b.offload, b.sequence, b.backward_weight_ms, b.weight_kept_bytes,
                  b.shared_weights);
}

madpipe::schedule::Stage madpipe::schedule::make_stage(const ChainCosts& costs, int id,
                                                       int first_layer, int last_layer, int gpu) {
  Stage stage;
  stage.id = id;
  stage.first_layer = first_layer;
  stage.last_layer = last_layer;
  stage.gpu = gpu;
  stage.forward_ms = costs.forward_ms(first_layer, last_layer);
  stage.backward_ms = costs.backward_ms(first_layer, last_layer);
  stage.weight_bytes = costs.weight_bytes(first_layer, last_layer);
  stage.stored_bytes = costs.stored_bytes(first_layer, last_layer);
  stage.output_bytes = costs.activation_bytes(last_layer);
  stage.workspace_bytes = costs.workspace_bytes(first_layer, last_layer);
  for (int group : costs.tied_groups_in(first_layer, last_layer))
    stage.shared_weights.push_back(SharedWeight{group, costs.tied_weights()[group].bytes});
  return with_split_backward(costs, std::move(stage));
}

madpipe::schedule::Stage madpipe::schedule::with_whole_backward(Stage stage) {
  stage.backward_weight_ms = 0;
  stage.weight_kept_bytes = 0;
  return stage;
}

madpipe::schedule::Stage madpipe::schedule::with_split_backward(const ChainCosts& costs,
                                                                Stage stage) {
  stage.backward_weight_ms = costs.backward_weight_ms(stage.first_layer, stage.last_layer);
  stage.weight_kept_bytes =
      stage.splits_backward() ? costs.weight_kept_bytes(stage.first_layer, stage.last_layer) : 0;
  return stage;
}

bool madpipe::schedule::can_split_backward(const ChainCosts& costs, const Stage& stage) {
  return !stage.uses_sequence() && stage.sequence.empty() &&
         costs.backward_weight_ms(stage.first_layer, stage.last_layer) > 0;
}

std::vector<madpipe::schedule::Stage> madpipe::schedule::make_stages(
    const ChainCosts& costs, const std::vector<int>& first_layers, const std::vector<int>& gpus) {
  if (first_layers.size() != gpus.size() || first_layers.empty() || first_layers[0] != 0)
    throw Error(ErrorKind::Internal, "", "", "make_stages: inconsistent stage boundaries");
  std::vector<Stage> stages;
  const int n = static_cast<int>(first_layers.size());
  for (int s = 0; s < n; ++s) {
    const int last = s + 1 < n ? first_layers[s + 1] - 1 : costs.num_layers() - 1;
    if (last < first_layers[s])
      throw Error(ErrorKind::Internal, "", "", "make_stages: empty stage");
    stages.push_back(make_stage(costs, s, first_layers[s], last, gpus[s]));
  }
  return stages;
}

bool madpipe::schedule::is_contiguous_allocation(const std::vector<Stage>& stages) {
  std::set<int> seen;
  for (const Stage& stage : stages)
    if (!seen.insert(stage.gpu).second) return false;
  return true;
}

static double transfer_at(std::int64_t bytes, double bytes_per_ms) {
  if (bytes_per_ms <= 0) return 0.0;
  return static_cast<double>(bytes) / bytes_per_ms;
}

double madpipe::schedule::transfer_ms(std::int64_t bytes, const Platform& platform, int from_gpu,
                                      int to_gpu) {
  return transfer_at(bytes, link_bandwidth(platform, from_gpu, to_gpu));
}

double madpipe::schedule::transfer_ms(std::int64_t bytes, const Platform& platform) {
  return transfer_at(bytes, slowest_link_bandwidth(platform));
}
