// Run under mpirun -np 1..4: receives posted ahead into a planned arena train exactly like
// receives posted up front into their own buffers, and the arena is never exceeded.

#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace mr = madpipe::runtime;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {
struct Outcome {
  std::vector<torch::Tensor> weights;  // this rank's stages, after training
  mr::PipelineExecutor::ArenaUse use;
};

Outcome train_with(mplan::ReceivePosting posting, int lookahead, Schedule schedule, int steps,
                   int micro_batches) {
  mr::ModelConfig config = small_config("mlp", 5);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  const int layers = static_cast<int>(model.layers.size());
  std::vector<int> first, gpus;
  for (int l = 0; l < layers; ++l) {  // one layer per stage, round robin: several stages a rank
    first.push_back(l);
    gpus.push_back(l % world_size());
  }
  const mplan::Plan plan = make_plan(layers, first, gpus, schedule, micro_batches, nullptr);
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  mplan::LowerOptions lowering;
  lowering.micro_batches = micro_batches;
  lowering.posting = posting;
  lowering.lookahead = lookahead;
  lowering.message_bytes = executor.message_bytes();
  const mplan::Program program = mplan::lower(plan, lowering);
  lowering.train = false;
  const mplan::Program validation = mplan::lower(plan, lowering);
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages())
    optimizers.push_back(std::make_unique<torch::optim::SGD>(executor.stage_parameters(s),
                                                             torch::optim::SGDOptions(0.05)));
  for (int step = 0; step < steps; ++step) {
    for (auto& o : optimizers) o->zero_grad();
    executor.run(program, [&](int i) { return data->micro_batch(step, i, false); });
    for (auto& o : optimizers) o->step();
    executor.evaluate(validation, [&](int i) { return data->micro_batch(step, i, true); });
  }
  Outcome out;
  for (int s : executor.local_stages())
    for (const torch::Tensor& p : executor.stage_parameters(s))
      out.weights.push_back(p.detach().clone());
  out.use = executor.arena_use();
  return out;
}
}  // namespace

TEST(ReceiveArena, TrainsLikeReceivesPostedUpFront) {
  for (Schedule schedule : {Schedule::OneFOneBStar, Schedule::GPipe}) {
    for (int lookahead : {0, 1, 3}) {
      const Outcome upfront = train_with(mplan::ReceivePosting::Upfront, 0, schedule, 2, 6);
      const Outcome arena = train_with(mplan::ReceivePosting::Arena, lookahead, schedule, 2, 6);
      ASSERT_EQ(upfront.weights.size(), arena.weights.size());
      for (std::size_t p = 0; p < arena.weights.size(); ++p)
        EXPECT_TRUE(torch::equal(upfront.weights[p], arena.weights[p]))
            << schedule_name(schedule) << " lookahead " << lookahead << " parameter " << p;
      const auto& use = arena.use;
      EXPECT_LE(use.high_water_bytes, use.planned_bytes);
      EXPECT_LE(use.peak_live_bytes, use.planned_bytes);
      EXPECT_LE(use.planned_bytes, use.sum_bytes);
      if (world_size() > 1) {
        EXPECT_GT(use.buffers, 0);
        // Six micro-batches never all hold their buffers at once in 1F1B*.
        if (schedule == Schedule::OneFOneBStar) {
          EXPECT_LT(use.planned_bytes, use.sum_bytes);
        }
      } else {
        EXPECT_EQ(use.buffers, 0);
      }
    }
  }
}
