// Run under mpirun -np 1..4: D replicas of a P-rank pipeline (D = 2 on an even world, else one
// replica per rank) must train like one process over the D * m micro-batches of a step.

#include "core/error.hpp"
#include "plan/program.hpp"
#include "runtime/comm/replicas.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

namespace mr = madpipe::runtime;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {
int replicas_for_world() { return world_size() % 2 == 0 ? 2 : world_size(); }
}  // namespace

TEST(ReplicaLayout, PipelinesAreConsecutiveRanks) {
  const mr::ReplicaLayout a = mr::replica_layout(5, 8, 2);
  EXPECT_EQ(a.pipeline_ranks, 4);
  EXPECT_EQ(a.replica, 1);
  EXPECT_EQ(a.position, 1);
  const mr::ReplicaLayout b = mr::replica_layout(2, 8, 4);
  EXPECT_EQ(b.pipeline_ranks, 2);
  EXPECT_EQ(b.replica, 1);
  EXPECT_EQ(b.position, 0);
  try {
    mr::replica_layout(0, 6, 4);
    FAIL() << "4 replicas cannot share 6 ranks";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 replicas do not divide the 6 ranks"), std::string::npos)
        << e.what();
  }
}

TEST(ReplicaGroups, CommunicatorsFollowTheLayout) {
  const mr::ReplicaGroups groups(
      mr::replica_layout(world_rank(), world_size(), replicas_for_world()));
  int pipeline_rank = -1, pipeline_size = 0, replica_rank = -1, replica_size = 0;
  MPI_Comm_rank(groups.pipeline(), &pipeline_rank);
  MPI_Comm_size(groups.pipeline(), &pipeline_size);
  MPI_Comm_rank(groups.replicas(), &replica_rank);
  MPI_Comm_size(groups.replicas(), &replica_size);
  EXPECT_EQ(pipeline_rank, groups.layout().position);
  EXPECT_EQ(pipeline_size, groups.layout().pipeline_ranks);
  EXPECT_EQ(replica_rank, groups.layout().replica);
  EXPECT_EQ(replica_size, groups.layout().replicas);
}

TEST(GradientAverager, AveragesTheLastBackwardsGradients) {
  const mr::ReplicaGroups groups(mr::replica_layout(world_rank(), world_size(), world_size()));
  const int d = groups.layout().replica, D = groups.layout().replicas;
  torch::Tensor w = torch::zeros({3}, torch::requires_grad());
  torch::Tensor unused = torch::zeros({2}, torch::requires_grad());  // no gradient: counts as 0
  w.mutable_grad() = torch::full({3}, static_cast<float>(d + 1));
  mr::GradientAverager averager(groups.replicas(), D, 1, 2);
  averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w, unused}; });
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), static_cast<float>(d + 1)) << "started after 1 of 2";
  averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w, unused}; });
  averager.finish();
  EXPECT_FLOAT_EQ(w.grad()[1].item<float>(), (D + 1) / 2.0f);
  if (D == 1) return;  // one replica: nothing to average, gradients are left alone
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_EQ(unused.grad().abs().sum().item<float>(), 0.0f);
}

// Trains `steps` SGD steps with D replicas of a pipeline over `cut` and compares with the unsplit
// model trained on all D * m micro-batches of each step.
static void replicas_match_unsplit(const std::string& model, int micro_batches, int steps,
                                   bool in_place = false) {
  const mr::ReplicaGroups groups(
      mr::replica_layout(world_rank(), world_size(), replicas_for_world()));
  const mr::ReplicaLayout& layout = groups.layout();
  const int P = layout.pipeline_ranks, D = layout.replicas;
  mr::ModelConfig config = small_config(model, 3);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel pipelined = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  const int layers = static_cast<int>(pipelined.layers.size());
  std::vector<int> first, gpus;
  for (int g = 0; g < P; ++g) {
    first.push_back(g * layers / P);
    gpus.push_back(g);
  }
  const mplan::Plan plan =
      make_plan(layers, first, gpus, Schedule::OneFOneBStar, micro_batches, nullptr, true, P);
  const mplan::Program program = mplan::lower(plan, micro_batches);
  auto transport = make_test_transport(plan, groups.pipeline(), 0, groups.replicas());
  mr::PipelineExecutor executor(pipelined, plan, layout.position, *transport,
                                data->micro_batch(0, 0, false));
  mr::GradientAverager averager(make_test_reducer(*transport, groups.replicas()), D,
                                static_cast<int>(plan.stages.size()), micro_batches);
  executor.on_backward(
      [&](int s, int) { averager.backward_done(s, [&] { return executor.stage_parameters(s); }); });
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages())
    optimizers.push_back(std::make_unique<torch::optim::SGD>(
        executor.stage_parameters(s), torch::optim::SGDOptions(0.1).momentum(0.9)));
  torch::optim::SGD reference_optimizer(reference.parameters(0, layers - 1),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    for (auto& o : optimizers) o->zero_grad();
    if (in_place)
      for (int s : executor.local_stages())
        averager.bind_gradients(s, executor.stage_parameters(s));
    executor.run(program, [&](int i) {
      return data->micro_batch(step, layout.replica * micro_batches + i, false);
    });
    averager.finish();
    for (auto& o : optimizers) o->step();
    reference_optimizer.zero_grad();
    mr::run_unsplit(reference, D * micro_batches,
                    [&](int i) { return data->micro_batch(step, i, false); });
    reference_optimizer.step();
  }
  for (int s : executor.local_stages()) {
    const std::vector<torch::Tensor> mine = executor.stage_parameters(s);
    EXPECT_LT(relative_difference(mine, reference.parameters(plan.stages[s].first_layer,
                                                             plan.stages[s].last_layer)),
              1e-5)
        << model << " stage " << s << " replica " << layout.replica;
    // Every replica holds the same weights, bit for bit.
    for (const torch::Tensor& p : mine) {
      torch::Tensor lowest = p.detach().clone(), highest = p.detach().clone();
      MPI_Allreduce(MPI_IN_PLACE, lowest.data_ptr(), static_cast<int>(p.numel()), MPI_FLOAT,
                    MPI_MIN, groups.replicas());
      MPI_Allreduce(MPI_IN_PLACE, highest.data_ptr(), static_cast<int>(p.numel()), MPI_FLOAT,
                    MPI_MAX, groups.replicas());
      EXPECT_TRUE(torch::equal(lowest, highest)) << "replicas of stage " << s << " diverged";
    }
  }
}

TEST(DataParallel, MlpReplicasMatchUnsplitTraining) { replicas_match_unsplit("mlp", 3, 3); }

TEST(DataParallel, GptReplicasMatchUnsplitTraining) { replicas_match_unsplit("gpt", 2, 2); }

// The same with the gradients as views of the all-reduce's bucket buffers (what training does).
TEST(DataParallel, ReplicasMatchUnsplitTrainingWithGradientsInTheBuckets) {
  replicas_match_unsplit("mlp", 3, 3, true);
  replicas_match_unsplit("gpt", 2, 2, true);
}

// A replica that never joins the all-reduce stops the others with a message after the timeout;
// once it joins, the pending all-reduce completes.
TEST(GradientAverager, TimesOutNamingTheStageThenCompletesOnceAllJoin) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const mr::ReplicaGroups groups(mr::replica_layout(world_rank(), world_size(), world_size()));
  const int D = groups.layout().replicas;
  torch::Tensor w = torch::zeros({4}, torch::requires_grad());
  w.mutable_grad() = torch::full({4}, static_cast<float>(world_rank()));
  mr::GradientAverager averager(groups.replicas(), D, 3, 1);
  averager.set_timeout(0.2);
  const bool late = world_rank() == D - 1;  // the last replica joins only after the others gave up
  if (!late) {
    averager.backward_done(2, [&] { return std::vector<torch::Tensor>{w}; });
    try {
      averager.finish();
      ADD_FAILURE() << "finish() should time out while a replica is missing";
    } catch (const madpipe::Error& e) {
      EXPECT_NE(std::string(e.what()).find("s for the gradient all-reduce of stage 2 over its " +
                                           std::to_string(D) + " replicas"),
                std::string::npos)
          << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  averager.set_timeout(0);
  if (late) averager.backward_done(2, [&] { return std::vector<torch::Tensor>{w}; });
  averager.finish();
  EXPECT_FLOAT_EQ(w.grad()[3].item<float>(), (D - 1) / 2.0f);
}
