#include "partition/allocation.hpp"

bool madpipe::partition::operator==(const Allocation& a, const Allocation& b) {
  return a.first_layers == b.first_layers && a.gpus == b.gpus;
}

std::vector<madpipe::schedule::Stage> madpipe::partition::stages_of(
    const ChainCosts& costs, const Allocation& allocation) {
  return schedule::make_stages(costs, allocation.first_layers, allocation.gpus);
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
