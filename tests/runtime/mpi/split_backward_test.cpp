// Split backwards: a layer's B computes its input gradient and W, later, its weight gradient.
// Under mpirun -np 1..4 (the pipelines have one stage group per rank).

#include "plan/program.hpp"
#include "plan/validate.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weight_gradients.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/two_weight_versions.hpp"
#include "schedule/memory.hpp"
#include "schedule/step_order.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace mr = madpipe::runtime;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {

// The gradients of every parameter of `layers` (held whole) and of the input, after one backward
// of the layers' output summed with fixed weights; with `defer`, the backward runs with the weight
// gradients deferred, which are then checked to be pending and run.
struct Gradients {
  std::vector<torch::Tensor> parameters;
  torch::Tensor input;
  std::int64_t kept_bytes = 0;
  int pending = 0;  // parameters without a gradient after B
};

Gradients gradients_of(mr::ChainModel& model, const torch::Tensor& input, bool defer) {
  const std::vector<torch::Tensor> params = model.parameters(0, model.size() - 1);
  for (const auto& p : params) p.mutable_grad() = torch::Tensor();
  const torch::Tensor leaf =
      input.is_floating_point() ? input.detach().requires_grad_(true) : input;
  auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
  torch::Tensor y = leaf;
  {
    std::optional<mr::DeferWeightGradients> scope;
    if (defer) scope.emplace(deferred);
    for (auto& layer : model.layers) y = layer.forward(y);
  }
  torch::manual_seed(3);
  const torch::Tensor weights = torch::rand_like(y);
  (y * weights).sum().backward();
  Gradients out;
  out.kept_bytes = deferred->kept_bytes();
  for (const auto& p : params) out.pending += p.grad().defined() ? 0 : 1;
  EXPECT_EQ(deferred->empty(), !defer);
  deferred->run();
  EXPECT_TRUE(deferred->empty());
  EXPECT_EQ(deferred->kept_bytes(), 0);
  for (const auto& p : params) out.parameters.push_back(p.grad().defined() ? p.grad().clone() : p);
  if (leaf.requires_grad()) out.input = leaf.grad().clone();
  return out;
}

// `deferred`: the parameters whose gradient waits for W.
void expect_same_gradients(const std::string& name, int layers, int deferred) {
  mr::ModelConfig config = small_config(name, layers);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  const torch::Tensor input = data->micro_batch(0, 0, false).input;
  const Gradients whole = gradients_of(model, input, false);
  const Gradients split = gradients_of(model, input, true);
  EXPECT_EQ(whole.pending, 0) << name;
  EXPECT_EQ(whole.kept_bytes, 0) << name;
  EXPECT_EQ(split.pending, deferred) << name;
  EXPECT_GT(split.kept_bytes, 0) << name;
  ASSERT_EQ(whole.parameters.size(), split.parameters.size());
  for (std::size_t p = 0; p < whole.parameters.size(); ++p)
    EXPECT_TRUE(torch::allclose(whole.parameters[p], split.parameters[p], 1e-5, 1e-6))
        << name << " parameter " << p;
  if (whole.input.defined()) {
    EXPECT_TRUE(torch::allclose(whole.input, split.input, 1e-5, 1e-6)) << name;
  }
}

}  // namespace

TEST(DeferredWeightGradients, EqualTheWholeBackward) {
  expect_same_gradients("mlp", 3, 8);  // 4 Linear layers: weights and biases
  // The two embeddings, each block's qkv, proj, fc1 and fc2, the head's out; not the layer norms.
  expect_same_gradients("gpt", 2, 2 + 2 * 8 + 2);
  // The stem's convolution, res0's two, res1's two and its shortcut, the classifier's weight and
  // bias; not the batch norms.
  expect_same_gradients("cnn", 2, 1 + 2 + 3 + 2);
}

TEST(DeferredWeightGradients, OnlyForwardsInTheScopeDefer) {
  mr::ModelConfig config = small_config("mlp", 2);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
  torch::Tensor x = data->micro_batch(0, 0, false).input;
  {
    mr::DeferWeightGradients scope(deferred);
    x = model.layers[0].forward(x);
  }
  for (int l = 1; l < model.size(); ++l) x = model.layers[l].forward(x);
  x.sum().backward();
  const std::vector<torch::Tensor> first = model.parameters(0, 0);
  const std::vector<torch::Tensor> rest = model.parameters(1, model.size() - 1);
  for (const auto& p : first) EXPECT_FALSE(p.grad().defined());
  for (const auto& p : rest) EXPECT_TRUE(p.grad().defined());
  deferred->run();
  for (const auto& p : first) EXPECT_TRUE(p.grad().defined());
}

// Layers outside the built-in models' settings: with and without a bias, strided, dilated and
// grouped convolutions; W gives what the whole backward gives, B leaves the parameters alone.
TEST(DeferredWeightGradients, CoverBiasesStridesDilationsAndGroups) {
  torch::manual_seed(5);
  torch::nn::Conv2d grouped(
      torch::nn::Conv2dOptions(4, 6, 3).stride(2).padding(2).dilation(2).groups(2).bias(true));
  torch::nn::Conv2d plain(torch::nn::Conv2dOptions(6, 3, 1).bias(false));
  torch::nn::Linear unbiased(torch::nn::LinearOptions(3 * 4 * 4, 5).bias(false));
  const torch::Tensor images = torch::rand({2, 4, 8, 8});
  const std::vector<torch::Tensor> params = {grouped->weight, grouped->bias, plain->weight,
                                             unbiased->weight};
  auto run = [&](bool defer) {
    for (torch::Tensor p : params) p.mutable_grad() = torch::Tensor();
    const torch::Tensor x = images.clone().requires_grad_(true);
    auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
    torch::Tensor y;
    {
      std::optional<mr::DeferWeightGradients> scope;
      if (defer) scope.emplace(deferred);
      y = mr::deferrable_conv2d(plain, torch::relu(mr::deferrable_conv2d(grouped, x)));
      y = mr::deferrable_linear(unbiased, y.flatten(1));
    }
    (y * torch::arange(5, torch::kFloat)).sum().backward();
    for (const torch::Tensor& p : params) EXPECT_EQ(p.grad().defined(), !defer);
    deferred->run();
    std::vector<torch::Tensor> out = {x.grad().clone()};
    for (const torch::Tensor& p : params) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<torch::Tensor> whole = run(false), split = run(true);
  ASSERT_EQ(whole.size(), split.size());
  for (std::size_t i = 0; i < whole.size(); ++i)
    EXPECT_TRUE(torch::allclose(whole[i], split[i], 1e-5, 1e-6)) << "gradient " << i;
}

// A waiting W holds what its weight gradient reads, not the graph behind it: the stage's input
// (the graph's leaf) and its gradient are freed when B is done, as the memory model says.
TEST(DeferredWeightGradients, HoldNothingOfTheGraphBeforeThem) {
  torch::nn::Linear linear(4, 3);
  auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl>;
  std::optional<Weak> input, input_grad;
  {
    torch::Tensor x = torch::rand({2, 4}).requires_grad_(true);
    torch::Tensor y;
    {
      mr::DeferWeightGradients scope(deferred);
      y = mr::deferrable_linear(linear, torch::tanh(x));  // its input has a history
    }
    y.sum().backward();
    input.emplace(x.getIntrusivePtr());
    input_grad.emplace(x.grad().getIntrusivePtr());
  }
  EXPECT_TRUE(input->expired());
  EXPECT_TRUE(input_grad->expired());
  ASSERT_FALSE(deferred->empty());
  deferred->run();
  EXPECT_TRUE(linear->weight.grad().defined());
}

TEST(DeferredWeightGradients, KeepTheirOwnCopyOfAnArena) {
  torch::nn::Linear linear(4, 3);
  const torch::Tensor arena = torch::rand({2 * 4});
  const torch::Tensor input = arena.view({2, 4}).detach().requires_grad_(true);
  auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
  torch::Tensor y;
  {
    mr::DeferWeightGradients scope(deferred);
    y = mr::deferrable_linear(linear, input);
  }
  y.sum().backward();
  const torch::Tensor expected = torch::ones({3, 2}).mm(arena.view({2, 4}));
  deferred->copy_out_of(arena);
  arena.zero_();  // a later message lands in the arena
  deferred->run();
  EXPECT_TRUE(torch::allclose(linear->weight.grad(), expected));
}

namespace {

// Trains `steps` steps pipelined with every stage's backward split (with `odd_stages_whole`, the
// odd-numbered stages run theirs whole, as a planner's partial split may), and unsplit; returns
// the largest relative weight difference over this rank's stages (the losses are checked to
// agree). Each W runs `w_delay` periods after where the schedule put it (the same place modulo
// the period): later messages then reuse the receive buffers of its micro-batch before it runs.
double train_split_and_compare(const std::string& name, const std::vector<int>& first_layers,
                               const std::vector<int>& gpus, Schedule schedule, bool arena,
                               int w_delay = 0, bool odd_stages_whole = false,
                               bool zb_v_order = false) {
  const int micro_batches = 6;
  mr::ModelConfig config = small_config(name, 3);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel pipelined = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  mplan::Plan plan = make_plan(pipelined.size(), first_layers, gpus, schedule, micro_batches,
                               nullptr, true, 0, /*split_backward=*/true);
  for (ms::Op& op : plan.pattern.ops)
    if (op.kind == ms::OpKind::W) op.shift -= w_delay;  // period j runs micro-batch j + shift
  for (const ms::Stage& stage : plan.stages) EXPECT_TRUE(stage.splits_backward());
  if (odd_stages_whole) {
    for (std::size_t s = 1; s < plan.stages.size(); s += 2) {
      plan.stages[s].backward_weight_ms = 0;
      plan.stages[s].weight_kept_bytes = 0;
    }
    auto& ops = plan.pattern.ops;
    ops.erase(std::remove_if(
                  ops.begin(), ops.end(),
                  [](const ms::Op& op) { return op.kind == ms::OpKind::W && op.stage % 2 == 1; }),
              ops.end());
  }
  if (zb_v_order) {
    plan.step_order = ms::zb_v_order(plan.stages, world_size(), micro_batches);
    EXPECT_TRUE(plan.step_order.has_value());
    EXPECT_TRUE(mplan::validate(plan).empty());
  }
  int split_here = 0;
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(pipelined, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  mplan::LowerOptions lowering;
  lowering.micro_batches = micro_batches;
  if (arena) lowering.message_bytes = executor.message_bytes();
  const mplan::Program program = mplan::lower(plan, lowering);
  EXPECT_EQ(mplan::dry_run(program), "");
  int weight_ops = 0;
  for (const mplan::Instr& instr : program.per_gpu[world_rank()])
    weight_ops += instr.kind == mplan::InstrKind::BackwardWeight ? 1 : 0;
  for (int s : executor.local_stages()) split_here += plan.stages[s].splits_backward() ? 1 : 0;
  EXPECT_EQ(weight_ops, micro_batches * split_here);
  train_side_by_side(executor, reference, program, *data, 2, micro_batches);
  return worst_stage_difference(executor, reference, plan);
}

}  // namespace

TEST(SplitBackward, PipelinedTrainingMatchesUnsplit) {
  const int P = world_size();
  // The CNN's batch norms run their whole backward at B, its convolutions defer.
  for (const std::string name : {"mlp", "gpt", "cnn"}) {
    const int layers = mr::build_model(small_config(name, 3)).size();
    std::vector<int> first, gpus;
    for (int g = 0; g < P; ++g) {
      first.push_back(g * layers / P);
      gpus.push_back(g);
    }
    for (Schedule schedule : {Schedule::OneFOneBStar, Schedule::OneFOneB})
      for (bool arena : {false, true})
        EXPECT_LT(train_split_and_compare(name, first, gpus, schedule, arena), 1e-5)
            << name << " " << schedule_name(schedule) << (arena ? " (receive arena)" : "");
    // Non-contiguous: one stage per layer, back and forth over the ranks.
    std::vector<int> all_first, all_gpus;
    for (int l = 0; l < layers; ++l) {
      all_first.push_back(l);
      all_gpus.push_back((l / P) % 2 == 0 ? l % P : P - 1 - l % P);
    }
    EXPECT_LT(train_split_and_compare(name, all_first, all_gpus, Schedule::Modulo, true), 1e-5)
        << name << " non-contiguous";
    EXPECT_LT(train_split_and_compare(name, all_first, all_gpus, Schedule::Modulo, true, 0, true),
              1e-5)
        << name << " non-contiguous, odd stages whole";
    EXPECT_LT(train_split_and_compare(name, first, gpus, Schedule::OneFOneB, true, 2), 1e-5)
        << name << " with W two periods late";
    // ZB-V: two stages per rank in a V, the step in the zero-bubble paper's order.
    if (layers >= 2 * P) {
      std::vector<int> v_first, v_gpus;
      for (int s = 0; s < 2 * P; ++s) {
        v_first.push_back(s * layers / (2 * P));
        v_gpus.push_back(s < P ? s : 2 * P - 1 - s);
      }
      EXPECT_LT(
          train_split_and_compare(name, v_first, v_gpus, Schedule::Modulo, true, 0, false, true),
          1e-5)
          << name << " ZB-V";
    }
  }
}

// Two layers that read the same input from the arena (a residual block's branch and its
// shortcut) keep one copy of it, as the profile counts it; W gives both their gradients.
TEST(DeferredWeightGradients, LayersReadingOneInputKeepOneCopyOfIt) {
  torch::nn::Linear branch(4, 3);
  torch::nn::Linear shortcut(4, 3);
  const torch::Tensor arena = torch::rand({2 * 4});
  const torch::Tensor input = arena.view({2, 4}).detach().requires_grad_(true);
  auto deferred = c10::make_intrusive<mr::DeferredWeightGradients>();
  torch::Tensor y;
  {
    mr::DeferWeightGradients scope(deferred);
    y = mr::deferrable_linear(branch, input) + mr::deferrable_linear(shortcut, input);
  }
  y.sum().backward();
  const torch::Tensor expected = torch::ones({3, 2}).mm(arena.view({2, 4}));
  deferred->copy_out_of(arena);
  arena.zero_();
  // The input once (8 floats), and the output gradient (one float, expanded: y.sum()'s).
  const std::int64_t input_bytes = 8 * 4;
  EXPECT_GE(deferred->kept_bytes(), input_bytes);
  EXPECT_LT(deferred->kept_bytes(), 2 * input_bytes);
  deferred->run();
  EXPECT_TRUE(torch::allclose(branch->weight.grad(), expected));
  EXPECT_TRUE(torch::allclose(shortcut->weight.grad(), expected));
}
