#include "runtime/model/layer_seed.hpp"

#include <mutex>

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

namespace {
// splitmix64's finalizer: consecutive inputs give unrelated outputs.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

void seed(at::Generator generator, std::uint64_t value) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(value);
}
}  // namespace

std::uint64_t madpipe::runtime::micro_batch_random_key(std::uint64_t seed, std::int64_t step,
                                                       int micro_batch) {
  return mix(mix(mix(seed) ^ static_cast<std::uint64_t>(step)) ^
             static_cast<std::uint64_t>(micro_batch));
}

void madpipe::runtime::seed_layer_forward(std::uint64_t key, int layer, const c10::Device& device) {
  const std::uint64_t value = mix(key ^ static_cast<std::uint64_t>(layer));
  seed(at::globalContext().defaultGenerator(c10::DeviceType::CPU), value);
  if (!device.is_cpu()) seed(at::globalContext().defaultGenerator(device), value);
}
