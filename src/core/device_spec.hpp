#pragma once

#include "core/weight_memory.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace madpipe {

// The peak rates of an accelerator, from which an analytic profile (analytic_profile.hpp) times
// the layers. FLOP/s are dense: without 2:4 structured sparsity, whose doubled figures the
// datasheets also quote.
struct DeviceSpec {
  std::string name;               // "h100", or "custom"
  std::string description;        // "NVIDIA H100 SXM 80GB"
  double matrix_flops = 0;        // bf16 and fp16 matrix products on tensor (matrix) cores, FLOP/s
  double fp32_flops = 0;          // fp32 without tensor cores (TF32 off, PyTorch's default), FLOP/s
  double memory_bandwidth = 0;    // bytes per second
  std::int64_t memory_bytes = 0;  // per device; 0: unknown

  // The FLOP/s of products computed in `precision`.
  double peak_flops(Precision precision) const;
};

// The presets: h100, h200, a100, b200, mi300x, l40s.
const std::vector<DeviceSpec>& device_presets();
// "h100, h200, a100, b200, mi300x, l40s"
std::string device_preset_names();
// The preset named `name` (case-insensitive); throws Error{InvalidInput} naming `field` and the
// presets otherwise.
DeviceSpec device_preset(const std::string& name, const std::string& field = "");

// A device given by its rates: `flops` for products in every precision, `bytes_per_second` of
// memory bandwidth. Throws Error{InvalidInput} (naming "peak-flops" or "memory-bandwidth")
// unless both are finite and > 0.
DeviceSpec custom_device_spec(double flops, double bytes_per_second);

}  // namespace madpipe
