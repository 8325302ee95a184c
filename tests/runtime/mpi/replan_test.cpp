// Moving training state between ranks when a run switches plans: optimizer state export and
// import, and layers migrating between ranks with their weights, buffers and optimizer state.
// Also the transport's watchdog: a transfer that never comes ends in an error, and how every rank
// learns of a non-finite loss or gradient.

#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/layer_migration.hpp"
#include "runtime/train/optimizer.hpp"
#include "runtime/train/sync_pipeline.hpp"
#include "runtime/train/trainer.hpp"

#include <climits>
#include <cmath>

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

namespace mr = madpipe::runtime;
namespace mt = madpipe::testing;
namespace mplan = madpipe::plan;

namespace {

std::vector<torch::Tensor> fresh_parameters() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(true), torch::randn({3}).requires_grad_(true)};
}

void fake_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& parameters,
               int step) {
  optimizer.zero_grad();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    parameters[i].mutable_grad() = torch::full_like(parameters[i], 0.1 * (step + 1) + 0.05 * i);
  optimizer.step();
}

// Two optimizers over equal parameters: one keeps going, the other is rebuilt after two steps
// from the exported state. They must stay equal.
void expect_state_survives_rebuild(mr::TrainConfig config) {
  std::vector<torch::Tensor> kept = fresh_parameters();
  std::vector<torch::Tensor> rebuilt = fresh_parameters();
  auto kept_optimizer = mr::make_optimizer(config, kept);
  auto first_optimizer = mr::make_optimizer(config, rebuilt);
  for (int step = 0; step < 2; ++step) {
    fake_step(*kept_optimizer, kept, step);
    fake_step(*first_optimizer, rebuilt, step);
  }
  mr::ParamStates states;
  for (const torch::Tensor& p : rebuilt) {
    states[mr::param_key(p)] = mr::export_param_state(*first_optimizer, p);
    EXPECT_FALSE(states[mr::param_key(p)].empty());
  }
  first_optimizer.reset();
  auto second_optimizer = mr::make_optimizer(config, rebuilt);
  for (const torch::Tensor& p : rebuilt)
    mr::import_param_state(*second_optimizer, p, states.at(mr::param_key(p)));
  for (int step = 2; step < 4; ++step) {
    fake_step(*kept_optimizer, kept, step);
    fake_step(*second_optimizer, rebuilt, step);
  }
  for (std::size_t i = 0; i < kept.size(); ++i) EXPECT_TRUE(torch::equal(kept[i], rebuilt[i])) << i;
}

}  // namespace

TEST(OptimizerState, AdamWStateSurvivesARebuild) {
  mr::TrainConfig config;
  config.optimizer = madpipe::runtime::OptimizerKind::AdamW;
  config.weight_decay = 0.01;
  expect_state_survives_rebuild(config);
}

TEST(OptimizerState, SgdMomentumSurvivesARebuild) {
  mr::TrainConfig config;
  config.optimizer = madpipe::runtime::OptimizerKind::Sgd;
  expect_state_survives_rebuild(config);
}

TEST(OptimizerState, WithoutTheStateTheRunsDiverge) {
  // The check above could pass if import did nothing and export gave nothing: a rebuild without
  // the state must differ.
  mr::TrainConfig config;
  std::vector<torch::Tensor> kept = fresh_parameters(), rebuilt = fresh_parameters();
  auto kept_optimizer = mr::make_optimizer(config, kept);
  auto first_optimizer = mr::make_optimizer(config, rebuilt);
  for (int step = 0; step < 2; ++step) {
    fake_step(*kept_optimizer, kept, step);
    fake_step(*first_optimizer, rebuilt, step);
  }
  auto second_optimizer = mr::make_optimizer(config, rebuilt);
  fake_step(*kept_optimizer, kept, 2);
  fake_step(*second_optimizer, rebuilt, 2);
  EXPECT_FALSE(torch::equal(kept[0], rebuilt[0]));
}

TEST(LayerMigration, LayersArriveWithTheirWeightsBuffersAndState) {
  const int ranks = mt::world_size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = mt::world_rank();
  mr::ModelConfig config;
  config.kind = mr::ModelKind::Cnn;  // batch-norm buffers move too
  config.layers = 2;
  config.width = 4;
  config.image = 8;
  config.outputs = 3;
  const mr::ChainModel reference = mr::build_model(config);
  mr::ChainModel model = mr::build_model(config);
  const int layers = static_cast<int>(model.layers.size());
  ASSERT_GE(layers, 3);
  // From: everything on the last rank but layer 0 on rank 0. To: everything on rank 0 but the
  // last layer on the last rank.
  const mplan::Plan from =
      mt::make_plan(layers, {0, 1}, {0, ranks - 1}, mt::Schedule::OneFOneB, 2, nullptr);
  const mplan::Plan to =
      mt::make_plan(layers, {0, layers - 1}, {0, ranks - 1}, mt::Schedule::OneFOneB, 2, nullptr);
  auto owner = [](const mplan::Plan& plan, int l) { return mr::rank_of_layer(plan, l); };
  for (int l = 0; l < layers; ++l) {
    if (owner(from, l) != rank)
      model.drop(l);
    else {
      torch::NoGradGuard no_grad;
      for (torch::Tensor b : model.layers[l].ptr()->buffers()) b.add_(1);  // moved, not rebuilt
    }
  }
  mr::ParamStates states;
  for (int l = 0; l < layers; ++l)
    if (owner(from, l) == rank)
      for (const torch::Tensor& p : model.layers[l].ptr()->parameters())
        states[mr::param_key(p)] = {torch::tensor(std::int64_t{7}), p.detach() * 2, p.detach() * 3};
  mr::migrate_layers(model, from, to, rank, states, torch::kCPU);
  std::size_t owned_parameters = 0;
  for (int l = 0; l < layers; ++l) {
    if (owner(to, l) != rank) {
      EXPECT_FALSE(model.holds(l)) << "layer " << l << " should be dropped";
      continue;
    }
    ASSERT_TRUE(model.holds(l)) << "layer " << l;
    const auto params = model.layers[l].ptr()->parameters();
    const auto expected = reference.layers[l].ptr()->parameters();
    const auto buffers = model.layers[l].ptr()->buffers();
    const auto expected_buffers = reference.layers[l].ptr()->buffers();
    owned_parameters += params.size();
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], expected[i])) << "layer " << l;
      const auto& state = states.at(mr::param_key(params[i]));
      ASSERT_EQ(state.size(), 3u);
      EXPECT_EQ(state[0].item<std::int64_t>(), 7);
      EXPECT_TRUE(torch::equal(state[2], expected[i] * 3)) << "layer " << l;
    }
    for (std::size_t i = 0; i < buffers.size(); ++i)
      EXPECT_TRUE(torch::equal(buffers[i], expected_buffers[i] + 1)) << "layer " << l;
  }
  // Nothing is left behind for layers a rank gave away: the states are the held parameters'.
  EXPECT_EQ(states.size(), owned_parameters);
}

TEST(TransportWatchdog, AMissingTransferBecomesAnErrorNamingBothRanks) {
  if (mt::world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = mt::world_rank();
  if (rank == 0) {
    auto transport = mr::make_mpi_transport(2, 0.2);
    transport->post_recv(1, {mr::Direction::Activation, 0, 3}, torch::empty({4}));
    // Rank 1 never sends: the wait must end in an error, not a hang.
    try {
      transport->wait_recv(1, {mr::Direction::Activation, 0, 3});
      ADD_FAILURE() << "expected a timeout";
    } catch (const madpipe::Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("rank 0 waited more than 0.2 s for the activation of stage 0, "
                             "micro-batch 3 from rank 1"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("--transfer-timeout"), std::string::npos) << message;
    }
  }  // the transport withdraws the receive it still holds
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(StepHealth, EveryRankNamesTheFirstStageWithANonFiniteGradient) {
  const int P = mt::world_size();
  std::vector<int> first_layers, gpus;
  for (int g = 0; g < P; ++g) {
    first_layers.push_back(g);
    gpus.push_back(g);
  }
  mr::SyncPipeline pipeline;
  pipeline.plan = mt::make_plan(P + 1, first_layers, gpus, mt::Schedule::OneFOneBStar, 2, nullptr);
  mr::ModelConfig config = mt::small_config("mlp", P);
  auto data = mt::data_for(config);
  mr::ChainModel model = mr::build_model(config);
  pipeline.transport = mt::make_test_transport(pipeline.plan);
  pipeline.executor = std::make_unique<mr::PipelineExecutor>(
      model, pipeline.plan, mt::world_rank(), *pipeline.transport, data->micro_batch(0, 0, false));
  for (int s : pipeline.executor->local_stages()) {
    for (const torch::Tensor& p : pipeline.executor->stage_parameters(s))
      p.mutable_grad() = torch::ones_like(p);
    pipeline.optimizers.push_back(std::make_unique<torch::optim::SGD>(
        pipeline.executor->stage_parameters(s), torch::optim::SGDOptions(0.1)));
    pipeline.stage_optimizers.emplace_back(s, pipeline.optimizers.back().get());
  }
  // Gradients of ones: the global norm is the square root of the model's parameter count, and
  // the loss the mean of the ranks' micro-batch losses.
  double local_count = 0, count = 0;
  for (int s : pipeline.executor->local_stages())
    for (const torch::Tensor& p : pipeline.executor->stage_parameters(s))
      local_count += static_cast<double>(p.numel());
  MPI_Allreduce(&local_count, &count, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const mr::StepLoss loss{static_cast<double>(mt::world_rank() + 1), 1};
  const mr::StepHealth healthy =
      mr::agree_on_health(pipeline, INT_MAX, loss, (mt::world_rank() + 1) * 100, true, 0);
  EXPECT_EQ(healthy.problem, "");
  EXPECT_EQ(healthy.peak_bytes, P * 100);  // the largest of the ranks'
  EXPECT_NEAR(healthy.grad_norm, std::sqrt(count), 1e-6 * std::sqrt(count));  // float norms
  EXPECT_DOUBLE_EQ(healthy.loss, (P + 1) / 2.0);
  // A rank that does not count (a later replica) leaves its gradients out of the norm.
  const mr::StepHealth partial =
      mr::agree_on_health(pipeline, INT_MAX, loss, 0, mt::world_rank() != 0, 0);
  double rank0_count = local_count;
  MPI_Bcast(&rank0_count, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_NEAR(partial.grad_norm * partial.grad_norm, count - rank0_count, 1e-6 * count)
      << "rank 0's share must be missing";
  // Clipping to half the norm scales every gradient on every rank by the same factor: the norm
  // halves (up to the 1e-6 that clip_grad_norm_ adds), and a bound above the norm changes nothing.
  mr::clip_gradients(pipeline, healthy.grad_norm, 2 * healthy.grad_norm);
  EXPECT_EQ(mr::agree_on_health(pipeline, INT_MAX, loss, 0, true, 0).grad_norm, healthy.grad_norm);
  mr::clip_gradients(pipeline, healthy.grad_norm, healthy.grad_norm / 2);
  EXPECT_NEAR(mr::agree_on_health(pipeline, INT_MAX, loss, 0, true, 0).grad_norm,
              healthy.grad_norm / 2, 1e-6);
  // The last parameter of the last stage, then also the first of stage 1 (on rank 1), turn NaN.
  const int last = P - 1;
  const int rank_of_last = pipeline.plan.stages[last].gpu;
  if (mt::world_rank() == rank_of_last)
    pipeline.executor->stage_parameters(last).back().mutable_grad()[0] = NAN;
  EXPECT_EQ(mr::agree_on_health(pipeline, INT_MAX, {}, 0, true, 0).problem,
            "a gradient of stage " + std::to_string(last) + " (rank " +
                std::to_string(rank_of_last) + ") is not finite");
  if (P >= 2) {
    if (mt::world_rank() == 1)
      pipeline.executor->stage_parameters(1).front().mutable_grad().view(-1)[0] = INFINITY;
    EXPECT_EQ(mr::agree_on_health(pipeline, INT_MAX, {}, 0, true, 0).problem,
              "a gradient of stage 1 (rank 1) is not finite");
  }
  // A non-finite loss is named first.
  EXPECT_EQ(mr::agree_on_health(pipeline, 3, {}, 0, true, 0).problem,
            "the loss of micro-batch 3 (stage " + std::to_string(last) + " on rank " +
                std::to_string(rank_of_last) + ") is not finite");
}
