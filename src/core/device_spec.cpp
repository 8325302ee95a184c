#include "core/device_spec.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace {
constexpr double kTera = 1e12;
constexpr std::int64_t kGB = 1'000'000'000;  // memory as the datasheets quote it

// Datasheet figures, dense (half the "with sparsity" numbers). Matrix: bf16/fp16 tensor (matrix)
// cores; fp32: the vector units (TF32 is off unless a run turns it on).
std::vector<madpipe::DeviceSpec> make_presets() {
  return {
      {"h100", "NVIDIA H100 SXM 80GB", 989 * kTera, 67 * kTera, 3.35 * kTera, 80 * kGB},
      {"h200", "NVIDIA H200 SXM 141GB", 989 * kTera, 67 * kTera, 4.8 * kTera, 141 * kGB},
      {"a100", "NVIDIA A100 SXM 80GB", 312 * kTera, 19.5 * kTera, 2.039 * kTera, 80 * kGB},
      // HGX B200 at 1000 W; 1440 GB per 8 GPUs.
      {"b200", "NVIDIA B200 (HGX)", 2250 * kTera, 80 * kTera, 8 * kTera, 180 * kGB},
      {"mi300x", "AMD Instinct MI300X", 1307.4 * kTera, 163.4 * kTera, 5.3 * kTera, 192 * kGB},
      {"l40s", "NVIDIA L40S", 362 * kTera, 91.6 * kTera, 0.864 * kTera, 48 * kGB},
  };
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}
}  // namespace

double madpipe::DeviceSpec::peak_flops(Precision precision) const {
  return precision == Precision::Fp32 ? fp32_flops : matrix_flops;
}

const std::vector<madpipe::DeviceSpec>& madpipe::device_presets() {
  static const std::vector<DeviceSpec> presets = make_presets();
  return presets;
}

std::string madpipe::device_preset_names() {
  std::string names;
  for (const DeviceSpec& spec : device_presets()) names += (names.empty() ? "" : ", ") + spec.name;
  return names;
}

madpipe::DeviceSpec madpipe::device_preset(const std::string& name, const std::string& field) {
  const std::string key = lower(name);
  for (const DeviceSpec& spec : device_presets())
    if (spec.name == key) return spec;
  throw_invalid("", field,
                "unknown device '" + name + "' (presets: " + device_preset_names() +
                    "; or give --peak-flops and --memory-bandwidth)");
}

madpipe::DeviceSpec madpipe::custom_device_spec(double flops, double bytes_per_second) {
  if (!(std::isfinite(flops) && flops > 0))
    throw_invalid("", "peak-flops", "must be a finite number > 0");
  if (!(std::isfinite(bytes_per_second) && bytes_per_second > 0))
    throw_invalid("", "memory-bandwidth", "must be a finite number > 0");
  DeviceSpec spec;
  spec.name = "custom";
  spec.description = "custom device";
  spec.matrix_flops = spec.fp32_flops = flops;
  spec.memory_bandwidth = bytes_per_second;
  return spec;
}
