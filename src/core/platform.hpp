#pragma once

#include <cstdint>

namespace madpipe {

// P identical GPUs with memory M each, any two linked with bandwidth beta.
struct Platform {
  int gpus = 1;
  std::int64_t memory_bytes = 0;
  double bandwidth_bytes_per_ms = 0;  // beta
  int weight_copies = 3;              // C: weights, gradients, optimizer state / second version
  double host_bandwidth_bytes_per_ms = 0;  // GPU <-> host copies for offloading; 0: no offloading
};

inline bool operator==(const Platform& a, const Platform& b) {
  return a.gpus == b.gpus && a.memory_bytes == b.memory_bytes &&
         a.bandwidth_bytes_per_ms == b.bandwidth_bytes_per_ms && a.weight_copies == b.weight_copies &&
         a.host_bandwidth_bytes_per_ms == b.host_bandwidth_bytes_per_ms;
}

}  // namespace madpipe
