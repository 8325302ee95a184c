#include "support/test_support.hpp"

madpipe::Profile madpipe::testing::make_chain(const std::vector<double>& fwd,
                                              const std::vector<double>& bwd,
                                              const std::vector<std::int64_t>& weights,
                                              const std::vector<std::int64_t>& outputs,
                                              std::int64_t input_bytes) {
  Profile profile;
  profile.name = "test-chain";
  profile.device = "test";
  profile.dtype = "float32";
  profile.batch = 1;
  profile.input_bytes = input_bytes;
  for (std::size_t l = 0; l < fwd.size(); ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = fwd[l];
    layer.backward_ms = l < bwd.size() ? bwd[l] : 0.0;
    layer.weight_bytes = l < weights.size() ? weights[l] : 0;
    layer.output_bytes = l < outputs.size() ? outputs[l] : 0;
    profile.layers.push_back(layer);
  }
  return profile;
}

madpipe::Profile madpipe::testing::two_layer_profile() {
  return make_chain({1, 1}, {2, 2}, {100, 200}, {500, 10}, 300);
}

madpipe::Profile madpipe::testing::tied_chain() {
  Profile profile = make_chain({1, 1, 1, 1}, {2, 2, 2, 2}, {1000, 50, 50, 700}, {10, 10, 10, 4}, 8);
  profile.tied_weights.push_back(TiedWeight{{0, 3}, 600});
  return profile;
}

madpipe::Profile madpipe::testing::random_chain(std::mt19937& rng, int layers) {
  std::uniform_real_distribution<double> time(0.5, 5.0);
  std::uniform_int_distribution<std::int64_t> bytes(1'000'000, 100'000'000);
  std::uniform_int_distribution<std::int64_t> saved(0, 100'000'000);
  Profile profile;
  profile.name = "random-chain";
  profile.device = "test";
  profile.dtype = "float32";
  profile.batch = 1;
  profile.input_bytes = bytes(rng);
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.forward_ms = time(rng);
    layer.backward_ms = 2 * time(rng);
    layer.weight_bytes = bytes(rng);
    layer.output_bytes = bytes(rng);
    layer.saved_bytes = saved(rng);
    profile.layers.push_back(layer);
  }
  return profile;
}

madpipe::Platform madpipe::testing::make_platform(int gpus, std::int64_t memory_bytes,
                                                  double bandwidth_bytes_per_ms,
                                                  int weight_copies) {
  Platform platform;
  platform.gpus = gpus;
  platform.memory_bytes = memory_bytes;
  platform.bandwidth_bytes_per_ms = bandwidth_bytes_per_ms;
  platform.weight_copies = weight_copies;
  return platform;
}

madpipe::Platform madpipe::testing::huge_memory_platform(int gpus, double bandwidth_bytes_per_ms,
                                                         int weight_copies) {
  return make_platform(gpus, kHugeMemory, bandwidth_bytes_per_ms, weight_copies);
}

madpipe::Platform madpipe::testing::small_platform(int gpus, double bandwidth_bytes_per_ms) {
  return make_platform(gpus, 1'000'000, bandwidth_bytes_per_ms, 3);
}

std::string madpipe::testing::shipped_profile_path(const std::string& name) {
  return std::string(MADPIPE_PROFILES_DIR) + "/" + name + ".json";
}

std::string madpipe::testing::test_data_path(const std::string& name) {
  return std::string(MADPIPE_TEST_DATA_DIR) + "/" + name;
}
