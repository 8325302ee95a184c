#pragma once

#include <cstdint>

#include <c10/core/Device.h>

namespace madpipe::runtime {

// Bytes held by tensors on one device: what the profiler measures (saved tensors, workspaces)
// and what traces report as a rank's peak. CPU: a counting allocator in front of LibTorch's
// (install_cpu_memory_counter(), which counts only what is allocated after it); CUDA: the caching
// allocator's allocated-bytes statistics.
class MemoryMeter {
 public:
  explicit MemoryMeter(c10::Device device);

  // False when nothing counts on this device (CPU before install_cpu_memory_counter(), or a CUDA
  // device in a build without CUDA); the readings are then 0.
  bool counting() const;
  std::int64_t current_bytes() const;
  std::int64_t peak_bytes() const;
  void reset_peak();  // the peak restarts from the current level
  // The peak since the previous call (or reset_peak), restarted from the current level; what
  // peak_bytes() reports still covers it. The executor reads it after every instruction.
  std::int64_t interval_peak();

 private:
  std::int64_t raw_peak_bytes() const;
  void reset_raw_peak();

  c10::Device device_;
};

// Puts the counting allocator in front of the CPU allocator; idempotent, process-wide.
void install_cpu_memory_counter();

// While one lives, the CPU blocks its thread allocates are not counted (nor their release): the
// training data a rank loads is host memory, outside the device memory a plan divides, which a
// CUDA meter does not see either. Nests.
class UncountedHostAllocations {
 public:
  UncountedHostAllocations();
  ~UncountedHostAllocations();
  UncountedHostAllocations(const UncountedHostAllocations&) = delete;
  UncountedHostAllocations& operator=(const UncountedHostAllocations&) = delete;

 private:
  bool previous_;
};

// Peak resident set of this process since it started (0 when unknown).
std::int64_t peak_resident_bytes();

}  // namespace madpipe::runtime
