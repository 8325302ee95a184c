#include "partition/allocation.hpp"

bool madpipe::partition::operator==(const Allocation& a, const Allocation& b) {
  return a.first_layers == b.first_layers && a.gpus == b.gpus;
}

std::vector<madpipe::schedule::Stage> madpipe::partition::stages_of(
    const ChainCosts& costs, const Allocation& allocation) {
  std::vector<schedule::Stage> stages =
      schedule::make_stages(costs, allocation.first_layers, allocation.gpus);
  for (schedule::Stage& stage : stages) {
    const auto it = allocation.remat.find({stage.first_layer, stage.last_layer});
    if (it != allocation.remat.end()) apply_remat(stage, it->second);
  }
  return stages;
}

void madpipe::partition::apply_remat(schedule::Stage& stage, const schedule::RematOption& option) {
  schedule::RematChain chain = schedule::make_remat_chain(stage.last_layer - stage.first_layer + 1);
  chain.first_layer = stage.first_layer;
  stage.forward_ms = option.forward_ms;
  stage.backward_ms = option.backward_ms;
  stage.stored_bytes = option.stored_bytes;
  stage.workspace_bytes = option.transient_bytes;
  int forwards = 0;
  bool offloads = false;
  for (const schedule::RematOp& op : option.sequence) {
    forwards += op.kind == schedule::RematOpKind::ForwardAll ||
                op.kind == schedule::RematOpKind::ForwardCheckpoint ||
                op.kind == schedule::RematOpKind::ForwardNone;
    offloads = offloads || op.kind == schedule::RematOpKind::Offload;
  }
  stage.offload = offloads ? "host" : "none";
  stage.remat = forwards > chain.length() || !offloads ? "rotor" : "none";
  stage.sequence = schedule::to_string(option.sequence, chain);
}

std::int64_t madpipe::partition::stage_buffer_bytes(const ChainCosts& costs, int first,
                                                    int last) {
  std::int64_t bytes = 0;
  if (first > 0) bytes += 2 * costs.activation_bytes(first - 1);
  if (last + 1 < costs.num_layers()) bytes += 2 * costs.activation_bytes(last);
  return bytes;
}

double madpipe::partition::link_ms(const ChainCosts& costs, int layer, const Platform& platform) {
  return 2 * schedule::transfer_ms(costs.activation_bytes(layer), platform);
}
