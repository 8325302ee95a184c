#include "core/platform.hpp"

#include <algorithm>

int madpipe::node_of(const Platform& platform, int gpu) {
  return platform.gpus_per_node > 0 ? gpu / platform.gpus_per_node : 0;
}

int madpipe::num_nodes(const Platform& platform) {
  if (platform.gpus_per_node <= 0) return 1;
  return std::max(1, (platform.gpus + platform.gpus_per_node - 1) / platform.gpus_per_node);
}

double madpipe::inter_node_bandwidth(const Platform& platform) {
  return platform.inter_node_bandwidth_bytes_per_ms > 0 ? platform.inter_node_bandwidth_bytes_per_ms
                                                        : platform.bandwidth_bytes_per_ms;
}

double madpipe::link_bandwidth(const Platform& platform, int a, int b) {
  return node_of(platform, a) == node_of(platform, b) ? platform.bandwidth_bytes_per_ms
                                                      : inter_node_bandwidth(platform);
}

// Whether some two GPUs share a node, and whether some two GPUs sit on different nodes.
static bool has_intra_node_links(const madpipe::Platform& platform) {
  return platform.gpus_per_node != 1;
}

static bool has_inter_node_links(const madpipe::Platform& platform) {
  return platform.gpus_per_node > 0 && platform.gpus > platform.gpus_per_node;
}

double madpipe::slowest_link_bandwidth(const Platform& platform) {
  if (!has_inter_node_links(platform)) return platform.bandwidth_bytes_per_ms;
  if (!has_intra_node_links(platform)) return inter_node_bandwidth(platform);
  return std::min(platform.bandwidth_bytes_per_ms, inter_node_bandwidth(platform));
}

double madpipe::fastest_link_bandwidth(const Platform& platform) {
  if (!has_inter_node_links(platform)) return platform.bandwidth_bytes_per_ms;
  if (!has_intra_node_links(platform)) return inter_node_bandwidth(platform);
  return std::max(platform.bandwidth_bytes_per_ms, inter_node_bandwidth(platform));
}

bool madpipe::has_uniform_links(const Platform& platform) {
  return !has_inter_node_links(platform) || !has_intra_node_links(platform) ||
         inter_node_bandwidth(platform) == platform.bandwidth_bytes_per_ms;
}

madpipe::Platform madpipe::with_uniform_links(const Platform& platform, double bytes_per_ms) {
  Platform uniform = platform;
  uniform.bandwidth_bytes_per_ms = bytes_per_ms;
  uniform.gpus_per_node = 0;
  uniform.inter_node_bandwidth_bytes_per_ms = 0;
  return uniform;
}
