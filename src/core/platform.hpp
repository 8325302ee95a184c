#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe {

// P identical GPUs with memory M each. Any two GPUs of one node are linked with bandwidth beta;
// on a multi-node platform (gpus_per_node > 0), GPU g is on node g / gpus_per_node and two GPUs
// of different nodes are linked with the inter-node bandwidth.
struct Platform {
  int gpus = 1;
  std::int64_t memory_bytes = 0;
  double bandwidth_bytes_per_ms = 0;  // beta: between two GPUs of one node
  int weight_copies = 3;              // C: weights, gradients, optimizer state / second version
  double host_bandwidth_bytes_per_ms = 0;  // GPU <-> host copies for offloading; 0: no offloading
  int gpus_per_node = 0;                   // 0: all GPUs in one node
  double inter_node_bandwidth_bytes_per_ms = 0;  // between nodes; 0: bandwidth_bytes_per_ms
};

inline bool operator==(const Platform& a, const Platform& b) {
  return a.gpus == b.gpus && a.memory_bytes == b.memory_bytes &&
         a.bandwidth_bytes_per_ms == b.bandwidth_bytes_per_ms &&
         a.weight_copies == b.weight_copies &&
         a.host_bandwidth_bytes_per_ms == b.host_bandwidth_bytes_per_ms &&
         a.gpus_per_node == b.gpus_per_node &&
         a.inter_node_bandwidth_bytes_per_ms == b.inter_node_bandwidth_bytes_per_ms;
}

// The most GPUs of one platform (one pipeline). Resource ids of a pattern (a GPU, or the link
// gpus + a * gpus + b between GPUs a and b) then fit an int with room to spare.
inline constexpr int kMaxGpus = 4096;

// One problem of a platform: `field` is the Platform member ("gpus", "memory_bytes", ...), which
// is also its name in a plan's "platform" object.
struct PlatformProblem {
  std::string field;
  std::string problem;  // "must be >= 1, got 0"
};

// Every problem of the platform, in member order; empty when it is valid: 1 <= gpus <= kMaxGpus,
// memory > 0, a finite bandwidth > 0, weight_copies >= 1, gpus_per_node >= 0, finite host and
// inter-node bandwidths >= 0. The one check of platforms: the planner, the validator and the
// command line all use it.
std::vector<PlatformProblem> platform_problems(const Platform& platform);

// Throws Error{InvalidInput} for the first problem of platform_problems(), with the field
// `field_prefix + field` (e.g. "/platform/gpus") in `file`.
void check_platform(const Platform& platform, const std::string& file = "",
                    const std::string& field_prefix = "");

// The node of GPU `gpu`: gpu / gpus_per_node, or 0 when gpus_per_node is 0 (one node).
int node_of(const Platform& platform, int gpu);

// Number of nodes: ceil(gpus / gpus_per_node), 1 when gpus_per_node is 0.
int num_nodes(const Platform& platform);

// The bandwidth between GPUs of different nodes: inter_node_bandwidth_bytes_per_ms, or
// bandwidth_bytes_per_ms when it is not set (0).
double inter_node_bandwidth(const Platform& platform);

// The bandwidth of the link between GPUs a and b (a != b): bandwidth_bytes_per_ms within a node,
// inter_node_bandwidth() between nodes.
double link_bandwidth(const Platform& platform, int a, int b);

// The slowest and the fastest bandwidth over all links that exist between two GPUs of the
// platform (bandwidth_bytes_per_ms when it has one GPU).
double slowest_link_bandwidth(const Platform& platform);
double fastest_link_bandwidth(const Platform& platform);

// True when every link of the platform has the same bandwidth: one node, one GPU per node, or an
// inter-node bandwidth equal to the intra-node one. Then which GPU runs a stage does not matter
// to the time of its transfers.
bool has_uniform_links(const Platform& platform);

// The platform as one node whose links all have `bytes_per_ms`, e.g. slowest_link_bandwidth().
Platform with_uniform_links(const Platform& platform, double bytes_per_ms);

}  // namespace madpipe
