// Run under mpirun -np 1..4: each rank builds only its own layers, with the weights an unsplit
// model has, and learns the boundary shapes without the other ranks' layers.

#include "runtime/device/memory_meter.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/layer_migration.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mr = madpipe::runtime;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {
std::int64_t bytes_of(const torch::nn::Module& layer) {
  std::int64_t total = 0;
  for (const torch::Tensor& t : layer.parameters()) total += t.numel() * t.element_size();
  for (const torch::Tensor& t : layer.buffers()) total += t.numel() * t.element_size();
  return total;
}

// One stage per layer, layer l on rank l % ranks.
mplan::Plan round_robin_plan(int layers) {
  std::vector<int> first, gpus;
  for (int l = 0; l < layers; ++l) {
    first.push_back(l);
    gpus.push_back(l % world_size());
  }
  return make_plan(layers, first, gpus, Schedule::OneFOneBStar, 2, nullptr);
}

class EveryModel : public ::testing::TestWithParam<std::string> {};
}  // namespace

// A layer's initial weights and buffers depend only on the seed and its index: a model holding
// every other layer, and a layer built later, equal the unsplit model's.
TEST_P(EveryModel, ALayerIsBuiltAsInTheUnsplitModel) {
  mr::ModelConfig config = small_config(GetParam(), 4);
  data_for(config);
  const mr::ChainModel whole = mr::build_model(config);
  mr::ChainModel odd = mr::build_model(config, [](int l) { return l % 2 == 1; });
  ASSERT_EQ(odd.size(), whole.size());
  for (int l = 0; l < whole.size(); ++l) {
    EXPECT_EQ(odd.holds(l), l % 2 == 1) << "layer " << l;
    odd.materialize(l, torch::kCPU);
    const auto mine = odd.layers[l].ptr()->parameters(),
               theirs = whole.layers[l].ptr()->parameters();
    ASSERT_EQ(mine.size(), theirs.size());
    for (std::size_t p = 0; p < mine.size(); ++p)
      EXPECT_TRUE(torch::equal(mine[p], theirs[p])) << GetParam() << " layer " << l;
    const auto buffers = odd.layers[l].ptr()->buffers(),
               expected = whole.layers[l].ptr()->buffers();
    ASSERT_EQ(buffers.size(), expected.size());
    for (std::size_t b = 0; b < buffers.size(); ++b)
      EXPECT_TRUE(torch::equal(buffers[b], expected[b])) << GetParam() << " layer " << l;
  }
  // Layers of the same shape do not repeat each other's random weights: the per-layer seeds
  // differ (constant initialisations such as layer norm's ones are alike by design).
  int compared = 0;
  for (int a = 0; a < whole.size(); ++a)
    for (int b = a + 1; b < whole.size(); ++b) {
      const auto x = whole.layers[a].ptr()->parameters(), y = whole.layers[b].ptr()->parameters();
      for (std::size_t p = 0; p < x.size() && p < y.size(); ++p) {
        if (x[p].sizes() != y[p].sizes() || x[p].numel() < 2 || x[p].std().item<double>() == 0)
          continue;
        ++compared;
        EXPECT_FALSE(torch::equal(x[p], y[p])) << "layers " << a << " and " << b;
      }
    }
  if (GetParam() != "cnn") {  // the cnn's blocks all differ in shape
    EXPECT_GT(compared, 0);
  }
}

// The shapes at the layer boundaries, found without holding a layer, are those of a forward pass
// through the unsplit model; the held layers' buffers do not move.
TEST_P(EveryModel, BoundaryShapesWithoutTheLayers) {
  mr::ModelConfig config = small_config(GetParam(), 3);
  const auto data = data_for(config);
  const mr::Batch sample = data->micro_batch(0, 0, false);
  mr::ChainModel whole = mr::build_model(config);
  std::vector<std::vector<std::int64_t>> expected;
  std::vector<torch::Dtype> expected_types;
  {
    torch::NoGradGuard no_grad;
    mr::ChainModel scratch = mr::build_model(config);
    torch::Tensor x = sample.input;
    for (auto& layer : scratch.layers) {
      x = layer.forward(x);
      expected.push_back(x.sizes().vec());
      expected_types.push_back(x.scalar_type());
    }
  }
  mr::ChainModel none = mr::build_model(config, [](int) { return false; });
  const mr::LayerOutputs found = mr::probe_layer_outputs(none, sample);
  EXPECT_EQ(found.shapes, expected);
  EXPECT_EQ(found.dtypes, expected_types);
  EXPECT_EQ(found.device, torch::Device(torch::kCPU));
  for (int l = 0; l < none.size(); ++l) EXPECT_FALSE(none.holds(l));

  const std::vector<torch::Tensor> before = whole.buffers(0, whole.size() - 1);
  std::vector<torch::Tensor> saved;
  for (const auto& b : before) saved.push_back(b.clone());
  EXPECT_EQ(mr::probe_layer_outputs(whole, sample).shapes, expected);
  for (std::size_t b = 0; b < before.size(); ++b) EXPECT_TRUE(torch::equal(before[b], saved[b]));
}

INSTANTIATE_TEST_SUITE_P(Models, EveryModel, ::testing::Values("gpt", "mlp", "cnn"),
                         [](const auto& param_info) { return param_info.param; });

// No rank holds another rank's layers: after building its share and probing the shapes, the
// bytes a rank's tensors hold are its layers' weights exactly, and on the way the most it held
// beyond them is one layer (the probe builds each layer alone) and one micro-batch's activations
// (under 128 KiB here).
TEST(LayerShare, NoRankHoldsAnotherRanksLayers) {
  mr::install_cpu_memory_counter();
  mr::ModelConfig config = small_config("gpt", 6);
  config.width = 64;
  config.heads = 4;
  const auto data = data_for(config);
  const mr::Batch sample = data->micro_batch(0, 0, false);
  const mr::ChainModel whole = mr::build_model(config);
  const mplan::Plan plan = round_robin_plan(whole.size());
  std::int64_t own = 0, largest = 0;
  for (int l = 0; l < whole.size(); ++l) {
    const std::int64_t bytes = bytes_of(*whole.layers[l].ptr());
    largest = std::max(largest, bytes);
    if (mr::rank_of_layer(plan, l) == world_rank()) own += bytes;
  }

  mr::MemoryMeter meter(torch::kCPU);
  ASSERT_TRUE(meter.counting());
  const std::int64_t before = meter.current_bytes();
  meter.reset_peak();
  mr::ChainModel mine = mr::build_model(config, mr::layers_of_rank(plan, world_rank()));
  const mr::LayerOutputs outputs = mr::probe_layer_outputs(mine, sample);
  EXPECT_EQ(outputs.shapes.size(), static_cast<std::size_t>(whole.size()));
  EXPECT_EQ(meter.current_bytes() - before, own) << "rank " << world_rank();
  EXPECT_LE(meter.peak_bytes() - before, own + largest + (1 << 17)) << "rank " << world_rank();
  for (int l = 0; l < mine.size(); ++l)
    EXPECT_EQ(mine.holds(l), mr::rank_of_layer(plan, l) == world_rank()) << "layer " << l;
  if (world_size() > 1) {
    EXPECT_THROW(mine.parameters(0, mine.size() - 1), madpipe::Error);
  }
}

// The executor reads the bytes its rank's tensors hold at every instruction: its peak is reached
// during an instruction of the rank's own list, and the meter's peak over the run covers it.
// GPipe keeps every micro-batch in flight, and the backwards run from stage outputs whose values
// left with their sends.
TEST(MemoryPeak, IsReachedAtAnInstructionOfTheRank) {
  mr::install_cpu_memory_counter();
  const int micro_batches = 6;
  mr::ModelConfig config = small_config("mlp", 2 * world_size());
  config.width = 256;
  const auto data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  std::vector<int> first, gpus;
  for (int g = 0; g < world_size(); ++g) {
    first.push_back(2 * g);
    gpus.push_back(g);
  }
  const mplan::Plan plan =
      make_plan(model.size(), first, gpus, Schedule::GPipe, micro_batches, nullptr);
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  const mplan::Program program = mplan::lower(plan, micro_batches);
  mr::MemoryMeter meter(torch::kCPU);
  meter.reset_peak();
  executor.run(program, [&](int i) { return data->micro_batch(1, i, false); });
  const mr::PipelineExecutor::MemoryPeak& peak = executor.memory_peak();
  EXPECT_GT(peak.bytes, 0);
  EXPECT_LE(peak.bytes, meter.peak_bytes());
  std::vector<std::string> names;
  for (const mplan::Instr& instr : program.per_gpu[world_rank()])
    names.push_back(mplan::to_string(instr));
  EXPECT_NE(std::find(names.begin(), names.end(), peak.at), names.end()) << peak.at;
  executor.reset_memory_peak();
  EXPECT_EQ(executor.memory_peak().bytes, 0);
}
