// Run under mpirun -np 1..4: what a stage keeps besides its weights. Validation runs in
// evaluation mode and leaves batch-norm statistics alone; checkpoints keep them. The optimizer
// updates as LibTorch's does, within the memory the plan gives it.

#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/config/train_config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/checkpoint_files.hpp"
#include "runtime/train/layer_checkpoint.hpp"
#include "runtime/train/optimizer.hpp"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mr = madpipe::runtime;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {
std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : tensors) out.push_back(t.detach().clone());
  return out;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}
}  // namespace

// Validation of a ResNet-style model split over the ranks: its losses are those of the unsplit
// model in evaluation mode, no running statistic moves, and the layers are back in training mode.
TEST(Validation, RunsInEvaluationModeAndKeepsBatchNormStatistics) {
  mr::ModelConfig config = small_config("cnn", 3);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  const int layers = static_cast<int>(model.layers.size());
  std::vector<int> first, gpus;
  for (int l = 0; l < layers; ++l) {
    first.push_back(l);
    gpus.push_back(l % world_size());
  }
  const mplan::Plan plan = make_plan(layers, first, gpus, Schedule::OneFOneBStar, 4, nullptr);
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, true));
  mplan::LowerOptions forwards;
  forwards.micro_batches = 4;
  forwards.train = false;
  const std::vector<torch::Tensor> before = copies(model.buffers(0, layers - 1));
  ASSERT_FALSE(before.empty());  // batch norm's running mean, variance and batch count
  auto batch_of = [&](int i) { return data->micro_batch(0, i, true); };
  const mr::StepLoss loss = executor.evaluate(mplan::lower(plan, forwards), batch_of);

  EXPECT_TRUE(all_equal(before, model.buffers(0, layers - 1)));
  for (const auto& layer : model.layers) EXPECT_TRUE(layer.ptr()->is_training());
  if (plan.stages.back().gpu == world_rank()) {
    ASSERT_EQ(loss.count, 4);
    torch::NoGradGuard no_grad;
    double expected = 0;
    for (auto& layer : reference.layers) layer.ptr()->eval();
    for (int i = 0; i < 4; ++i) {
      torch::Tensor x = batch_of(i).input;
      for (auto& layer : reference.layers) x = layer.forward(x);
      expected += reference.loss(x, batch_of(i).target).item<double>();
    }
    EXPECT_NEAR(loss.sum, expected, 1e-5 * std::abs(expected));
  }
}

// A stage's checkpoint holds its buffers too (batch-norm statistics), and loads onto the device
// it is asked for.
TEST(Checkpoint, KeepsAStagesBuffers) {
  mr::ModelConfig config = small_config("cnn", 2);
  mr::ChainModel trained = mr::build_model(config);
  mr::ChainModel fresh = mr::build_model(config);
  const int last = static_cast<int>(trained.layers.size()) - 1;
  {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& b : trained.buffers(0, last)) b.add_(1);
  }
  ASSERT_FALSE(all_equal(trained.buffers(0, last), fresh.buffers(0, last)));
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("madpipe_stage_state_" + std::to_string(world_rank())))
                              .string();
  mr::remove_tree(dir);
  mr::save_stage(dir, 3, 0, {trained.parameters(0, last), trained.buffers(0, last), nullptr});
  mr::load_stage(dir, 3, 0, {fresh.parameters(0, last), fresh.buffers(0, last), nullptr},
                 torch::kCPU);
  EXPECT_TRUE(all_equal(trained.buffers(0, last), fresh.buffers(0, last)));
  EXPECT_TRUE(all_equal(trained.parameters(0, last), fresh.parameters(0, last)));
  // A stage whose buffers do not match is refused, naming the field.
  try {
    mr::load_stage(dir, 3, 0, {fresh.parameters(0, last), {}, nullptr}, torch::kCPU);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("buffers"), std::string::npos) << e.what();
  }
  mr::remove_tree(dir);
}

// A checkpoint keyed by the model: each layer's file holds its tensors by key and each
// parameter's optimizer state, and loads into a model whose optimizers group the parameters
// otherwise (another plan); a layer of another model is refused, naming the keys.
TEST(Checkpoint, LayerFilesLoadIntoAnyGrouping) {
  mr::ModelConfig config = small_config("mlp", 3);
  mr::ChainModel trained = mr::build_model(config);
  mr::ChainModel fresh = mr::build_model(config);
  const int layers = trained.size();
  mr::TrainConfig settings;
  settings.optimizer = mr::OptimizerKind::AdamW;
  // Trained: one optimizer over every layer; fresh: one per layer.
  auto all = mr::make_optimizer(settings, trained.parameters(0, layers - 1));
  for (const torch::Tensor& p : trained.parameters(0, layers - 1))
    p.mutable_grad() = torch::ones_like(p);
  all->step();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("madpipe_layer_files_" + std::to_string(world_rank())))
                              .string();
  mr::remove_tree(dir);
  auto state_of = [](mr::ChainModel& model, int l, torch::optim::Optimizer* optimizer) {
    mr::LayerState state;
    state.layer = l;
    state.parameter_keys = model.parameter_keys(l, l);
    state.buffer_keys = model.buffer_keys(l, l);
    state.parameters = model.parameters(l, l);
    state.buffers = model.buffers(l, l);
    state.optimizers.assign(state.parameters.size(), optimizer);
    return state;
  };
  for (int l = 0; l < layers; ++l) mr::save_layer(dir, 7, state_of(trained, l, all.get()));
  EXPECT_TRUE(mr::holds_layer_files(dir, 7));
  std::vector<std::unique_ptr<torch::optim::Optimizer>> per_layer;
  for (int l = 0; l < layers; ++l) {
    per_layer.push_back(mr::make_optimizer(settings, fresh.parameters(l, l)));
    mr::load_layer(dir, 7, state_of(fresh, l, per_layer.back().get()), torch::kCPU);
    EXPECT_EQ(mr::verify_layer(dir, 7, l), "");
  }
  EXPECT_TRUE(all_equal(trained.parameters(0, layers - 1), fresh.parameters(0, layers - 1)));
  for (int l = 0; l < layers; ++l)
    for (const torch::Tensor& p : fresh.parameters(l, l)) {
      const std::vector<torch::Tensor> state = mr::export_param_state(*per_layer[l], p);
      ASSERT_EQ(state.size(), 3u);  // step, exp_avg, exp_avg_sq
      EXPECT_EQ(state[0].item<std::int64_t>(), 1);
      EXPECT_TRUE(torch::allclose(state[1], torch::full_like(p, 0.1)));  // (1 - beta1) * 1
    }
  mr::LayerState other = state_of(fresh, 1, nullptr);
  other.layer = 0;  // layer 1's tensors against layer 0's file
  try {
    mr::load_layer(dir, 7, other, torch::kCPU);
    FAIL() << "expected an error";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("layer-0.pt: parameter_keys: the checkpoint's layer 0 holds"),
        std::string::npos)
        << e.what();
  }
  mr::remove_tree(dir);
}

// --keep-checkpoints: the newest complete checkpoints stay, older ones and failed ones go.
TEST(Checkpoint, PruneKeepsTheNewestComplete) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("madpipe_prune_" + std::to_string(world_rank())))
          .string();
  mr::remove_tree(dir);
  // 1..4 complete, then 5 failed while written, 6 complete; 7 is newer; 0 (an older layout's,
  // complete without a marker) stays when not the previous one.
  for (int step = 0; step <= 7; ++step) {
    std::filesystem::create_directories(mr::checkpoint_dir(dir, step));
    if (step >= 1 && step <= 4) mr::mark_complete(dir, step);
  }
  mr::mark_complete(dir, 6);
  EXPECT_EQ(mr::prune_checkpoints(dir, 6, 2, 4), (std::vector<int>{1, 2, 3}));
  for (int step = 0; step <= 7; ++step)
    EXPECT_EQ(std::filesystem::exists(mr::checkpoint_dir(dir, step)),
              step == 0 || step == 4 || step >= 6)
        << step;
  EXPECT_TRUE(mr::prune_checkpoints(dir, 6, 0, 4).empty());  // 0: keep all
  // The previous checkpoint counts as complete without its marker (older layouts).
  std::filesystem::remove(mr::checkpoint_dir(dir, 4) / "complete");
  EXPECT_TRUE(mr::prune_checkpoints(dir, 6, 2, 4).empty());
  EXPECT_TRUE(std::filesystem::exists(mr::checkpoint_dir(dir, 4)));
  mr::remove_tree(dir);
}

// madpipe's AdamW updates the weights and its state exactly as LibTorch's, and a step (state
// made) holds at most one temporary of its largest parameter's size at a time, where LibTorch's
// holds two: the optimizer stays within a stage's workspace (its backward's).
TEST(Optimizer, AdamWUpdatesAsLibTorchsWithOneTemporary) {
  mr::install_cpu_memory_counter();
  torch::manual_seed(7);
  const std::vector<torch::Tensor> start = {torch::randn({64, 32}), torch::randn({32})};
  auto parameters = [&] {
    std::vector<torch::Tensor> out;
    for (const torch::Tensor& t : start) out.push_back(t.clone().requires_grad_(true));
    return out;
  };
  std::vector<torch::Tensor> ours = parameters(), theirs = parameters();
  mr::TrainingSettings settings;
  settings.optimizer = mr::OptimizerKind::AdamW;
  settings.learning_rate = 0.01;
  settings.weight_decay = 0.1;
  const std::unique_ptr<torch::optim::Optimizer> optimizer = mr::make_optimizer(settings, ours);
  // The bias (one dimension) does not decay.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs[1]});
  groups.emplace_back(std::vector<torch::Tensor>{theirs[0]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  torch::optim::AdamW reference(groups, torch::optim::AdamWOptions(0.01).weight_decay(0));
  mr::MemoryMeter meter(torch::kCPU);
  const std::int64_t largest = 64 * 32 * 4;
  std::int64_t our_extra = 0, their_extra = 0;
  auto step = [&](torch::optim::Optimizer& o, std::int64_t& extra) {
    const std::int64_t before = meter.current_bytes();
    meter.reset_peak();
    o.step();
    extra = std::max(extra, meter.peak_bytes() - before);
  };
  for (int s = 0; s < 4; ++s) {
    for (std::size_t i = 0; i < start.size(); ++i) {
      const torch::Tensor grad = torch::randn_like(start[i]);
      ours[i].mutable_grad() = grad.clone();
      theirs[i].mutable_grad() = grad.clone();
    }
    if (s == 0) {  // the first step makes the state
      optimizer->step();
      reference.step();
      continue;
    }
    step(*optimizer, our_extra);
    step(reference, their_extra);
  }
  EXPECT_TRUE(all_equal(copies(ours), copies(theirs)));
  for (std::size_t i = 0; i < start.size(); ++i)
    EXPECT_TRUE(all_equal(mr::export_param_state(*optimizer, ours[i]),
                          mr::export_param_state(reference, theirs[i])));
  // Besides, a few bytes of 0-dim scalars (the CPU meter sees them; a GPU keeps them on the host).
  EXPECT_LE(our_extra, largest + 64);
  EXPECT_GT(their_extra, largest);  // what the test would see without madpipe's step
}
