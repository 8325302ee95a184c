// Run under mpirun -np 1..4: every rank runs every test; a pipeline has one stage group per rank.
// Synchronous pipelined training must give the weights of unsplit training with gradient
// accumulation over the same micro-batches.

#include "core/chain.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/validate.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/two_weight_versions.hpp"
#include "schedule/gpipe.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/search.hpp"
#include "schedule/step_order.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

namespace mr = madpipe::runtime;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

struct Case {
  std::string model;
  std::vector<int> first_layers;
  std::vector<int> gpus;
  Schedule schedule;
  bool interleaved_order = false;  // the step in Megatron's interleaved 1F1B order
};

// Trains `steps` steps pipelined and unsplit; returns the largest relative weight difference
// over this rank's stages, and checks the losses agree.
static double train_and_compare(const Case& c, int steps, int micro_batches) {
  mr::ModelConfig config = small_config(c.model, c.model == "mlp" ? 4 : 3);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel pipelined = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  const int layers = static_cast<int>(pipelined.layers.size());
  mplan::Plan plan = make_plan(layers, c.first_layers, c.gpus, c.schedule, micro_batches, nullptr);
  if (c.interleaved_order) {
    plan.step_order = ms::interleaved_1f1b_order(plan.stages, world_size(), micro_batches);
    EXPECT_TRUE(plan.step_order.has_value());
    EXPECT_TRUE(mplan::validate(plan).empty());
  }
  const mplan::Program program = mplan::lower(plan, micro_batches);
  EXPECT_EQ(mplan::dry_run(program), "");

  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(pipelined, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  madpipe::testing::train_side_by_side(executor, reference, program, *data, steps, micro_batches);
  return worst_stage_difference(executor, reference, plan);
}

// Stage cuts for a model of `layers` layers onto the world's ranks.
static std::vector<Case> cases_for(const std::string& model, int layers) {
  const int P = world_size();
  std::vector<Case> cases;
  // Contiguous: one stage per rank.
  std::vector<int> first, gpus;
  for (int g = 0; g < P; ++g) {
    first.push_back(g * layers / P);
    gpus.push_back(g);
  }
  for (Schedule s : {Schedule::OneFOneBStar, Schedule::OneFOneB, Schedule::GPipe})
    cases.push_back({model, first, gpus, s});
  // Non-contiguous: one stage per layer, round robin over the ranks, back and forth.
  std::vector<int> all_first, all_gpus;
  for (int l = 0; l < layers; ++l) {
    all_first.push_back(l);
    const int lap = l / P, pos = l % P;
    all_gpus.push_back(lap % 2 == 0 ? pos : P - 1 - pos);
  }
  cases.push_back({model, all_first, all_gpus, Schedule::Modulo});
  // Interleaved: layers / P chunks per rank in a loop, the step in Megatron's order.
  const int chunks = std::max(1, layers / P);
  std::vector<int> loop_first, loop_gpus;
  for (int s = 0; s < chunks * P && s < layers; ++s) {
    loop_first.push_back(s);
    loop_gpus.push_back(s % P);
  }
  if (static_cast<int>(loop_first.size()) == chunks * P)
    cases.push_back({model, loop_first, loop_gpus, Schedule::Modulo, true});
  return cases;
}

TEST(PipelineEquivalence, MlpMatchesUnsplitTraining) {
  for (const Case& c : cases_for("mlp", 5)) {
    const double worst = train_and_compare(c, 3, 4);
    EXPECT_LT(worst, 1e-5) << "schedule " << static_cast<int>(c.schedule);
  }
}

TEST(PipelineEquivalence, GptMatchesUnsplitTraining) {
  for (const Case& c : cases_for("gpt", 5)) {
    const double worst = train_and_compare(c, 2, 3);
    EXPECT_LT(worst, 1e-5) << "schedule " << static_cast<int>(c.schedule);
  }
}

TEST(PipelineEquivalence, CnnMatchesUnsplitTraining) {
  for (const Case& c : cases_for("cnn", 5)) {
    const double worst = train_and_compare(c, 2, 3);
    EXPECT_LT(worst, 1e-5) << "schedule " << static_cast<int>(c.schedule);
  }
}

TEST(PipelineEquivalence, RandomAllocationsRunToCompletion) {
  std::mt19937 rng(2024);  // same on every rank, so every rank builds the same plans
  for (int trial = 0; trial < 6; ++trial) {
    const int layers = 5;
    std::vector<int> first{0}, gpus;
    for (int l = 1; l < layers; ++l)
      if (rng() % 2) first.push_back(l);
    for (std::size_t s = 0; s < first.size(); ++s)
      gpus.push_back(static_cast<int>(rng() % world_size()));
    const double worst =
        train_and_compare({"mlp", first, gpus, Schedule::Modulo}, 1, 2 + trial % 3);
    EXPECT_LT(worst, 1e-5) << "trial " << trial;
  }
}

// 2BW: the pipelined run follows W(g+1) = W(g) - step(gradient of generation g on W(g-1)),
// computed here in one process for comparison.
// Models of 5 layers: the mlp (4 hidden layers), the gpt (3 blocks) and the cnn (3 residual
// blocks, with batch norm).
static double two_bw_against_rule(Schedule schedule, const std::vector<int>& first,
                                  const std::vector<int>& gpus, bool split_backward = false,
                                  const std::string& model = "mlp") {
  mr::ModelConfig config = small_config(model, 3);
  std::unique_ptr<mr::DataSource> data_source;
  if (model == "mlp") {
    config.layers = 4;
    config.width = 12;
    config.seed = 5;
    data_source = std::make_unique<mr::SyntheticData>(config.inputs, config.outputs, 3, 11);
  } else {
    data_source = data_for(config);
  }
  const mr::DataSource& data = *data_source;
  const int generations = 4;
  mr::ChainModel first_copy = mr::build_model(config);
  mr::ChainModel second_copy = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  const int layers = static_cast<int>(first_copy.layers.size());
  const mplan::Plan plan =
      make_plan(layers, first, gpus, schedule, 4, nullptr, true, 0, split_backward);
  // 2BW needs at least NCA micro-batches per update.
  const std::vector<int> nca =
      ms::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  const int m = std::max(3, *std::max_element(nca.begin(), nca.end()));
  mplan::LowerOptions lowering;
  lowering.micro_batches = generations * m;
  lowering.update_micro_batches = m;  // the updates are the program's optimizer steps
  const mplan::Program program = mplan::lower(plan, lowering);
  EXPECT_EQ(mplan::dry_run(program), "");
  auto batch_of = [&](int i) { return data.micro_batch(i / m + 1, i % m, false); };
  auto make_sgd =
      [](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(params,
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  };

  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(first_copy, plan, world_rank(), *transport, batch_of(0));
  mr::TwoWeightVersions versions(executor, second_copy, m, make_sgd);
  executor.run(program, batch_of);
  EXPECT_EQ(versions.updates(), generations * static_cast<int>(executor.local_stages().size()));

  // The rule, unsplit: gradients of generation g on W(g-1), applied to W(g).
  std::vector<torch::Tensor> params = reference.parameters(0, layers - 1);
  std::vector<torch::Tensor> newest;
  for (const auto& p : params) newest.push_back(p.detach().clone().requires_grad_(true));
  auto optimizer = make_sgd(newest);
  std::vector<torch::Tensor> previous;
  for (const auto& p : params) previous.push_back(p.detach().clone());
  for (int g = 0; g < generations; ++g) {
    {
      torch::NoGradGuard no_grad;
      for (std::size_t p = 0; p < params.size(); ++p) params[p].copy_(previous[p]);
    }
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    mr::run_unsplit(reference, m, [&](int j) { return batch_of(g * m + j); });
    for (std::size_t p = 0; p < params.size(); ++p) {
      previous[p] = newest[p].detach().clone();  // W(g) serves generation g + 1
      newest[p].mutable_grad() = params[p].grad().detach().clone();
    }
    optimizer->step();
  }
  double worst = 0;
  for (int s : executor.local_stages()) {
    const auto mine = versions.newest(s);
    // The reference's tensors of stage s: count the parameters of the layers before it.
    std::size_t offset =
        reference
            .parameters(0, plan.stages[s].first_layer - 1 < 0 ? -1 : plan.stages[s].first_layer - 1)
            .size();
    if (plan.stages[s].first_layer == 0) offset = 0;
    for (std::size_t p = 0; p < mine.size(); ++p) {
      const auto& theirs = newest[offset + p];
      const double scale = theirs.abs().max().item<double>() + 1e-6;
      worst = std::max(worst, (mine[p] - theirs).abs().max().item<double>() / scale);
    }
  }
  return worst;
}

TEST(TwoWeightVersions, FollowsThe2BWUpdateRule) {
  const int P = world_size();
  std::vector<int> first, gpus;
  for (int g = 0; g < P; ++g) {
    first.push_back(g * 5 / P);
    gpus.push_back(g);
  }
  EXPECT_LT(two_bw_against_rule(Schedule::OneFOneB, first, gpus), 1e-5);
  // Non-contiguous: five one-layer stages, back and forth over the ranks.
  std::vector<int> all_first, all_gpus;
  for (int l = 0; l < 5; ++l) {
    all_first.push_back(l);
    all_gpus.push_back((l / P) % 2 == 0 ? l % P : P - 1 - l % P);
  }
  EXPECT_LT(two_bw_against_rule(Schedule::Modulo, all_first, all_gpus), 1e-5);
  // Split backwards: a micro-batch's gradient is complete, and its weight copy free, after W.
  EXPECT_LT(two_bw_against_rule(Schedule::OneFOneB, first, gpus, true), 1e-5);
  EXPECT_LT(two_bw_against_rule(Schedule::Modulo, all_first, all_gpus, true), 1e-5);
  // A transformer, and a CNN whose two weight copies share their batch-norm statistics.
  for (const char* model : {"gpt", "cnn"}) {
    EXPECT_LT(two_bw_against_rule(Schedule::OneFOneB, first, gpus, false, model), 1e-5) << model;
    EXPECT_LT(two_bw_against_rule(Schedule::Modulo, all_first, all_gpus, false, model), 1e-5)
        << model;
  }
}

namespace {

// Rank 0 prints the results; every other rank prints its own failures. A fatal failure (a failed
// ASSERT, an exception) ends the test on its rank only, and the other ranks would wait for it in
// their next message or collective until the test's timeout: every rank aborts at once instead.
class RankFailures : public ::testing::EmptyTestEventListener {
  // (GoogleTest reports results holding the lock that current_test_info() takes.)
  void OnTestStart(const ::testing::TestInfo& test) override {
    name = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    if (world_rank() != 0)
      std::fprintf(stderr, "rank %d: %s failed at %s:%d\n%s\n", world_rank(), name.c_str(),
                   result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                   result.message());
    if (!result.fatally_failed()) return;
    std::fprintf(stderr, "rank %d: fatal failure in %s: aborting every rank\n", world_rank(),
                 name.c_str());
    std::fflush(nullptr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::string name = "(no test)";
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  torch::set_num_threads(1);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world_rank() != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailures);
  const int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
