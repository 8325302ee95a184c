// Run under mpirun -np 1..4: receives posted ahead into a planned arena train exactly like
// receives posted up front into their own buffers, and the arena is never exceeded.

#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
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

struct Programs {
  mplan::Program training, validation;
};

Programs lower_both(const mplan::Plan& plan, const mr::PipelineExecutor& executor,
                    mplan::ReceivePosting posting, int lookahead, int micro_batches) {
  mplan::LowerOptions lowering;
  lowering.micro_batches = micro_batches;
  lowering.posting = posting;
  lowering.lookahead = lookahead;
  lowering.message_bytes = executor.message_bytes();
  Programs programs;
  programs.training = mplan::lower(plan, lowering);
  lowering.train = false;
  programs.validation = mplan::lower(plan, lowering);
  return programs;
}

std::vector<std::unique_ptr<torch::optim::SGD>> sgd_per_stage(mr::PipelineExecutor& executor) {
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages())
    optimizers.push_back(std::make_unique<torch::optim::SGD>(executor.stage_parameters(s),
                                                             torch::optim::SGDOptions(0.05)));
  return optimizers;
}

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
  const Programs programs = lower_both(plan, executor, posting, lookahead, micro_batches);
  const mplan::Program& program = programs.training;
  const mplan::Program& validation = programs.validation;
  auto optimizers = sgd_per_stage(executor);
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

namespace {
// out = x + bias in training (the input's gradient is the output's, the same tensor), out = x in
// validation (the output is the input): a stage of it gives back views of its receive buffers.
struct PassThroughImpl : torch::nn::Module {
  explicit PassThroughImpl(int width) : bias(register_parameter("bias", torch::zeros({width}))) {}
  torch::Tensor forward(const torch::Tensor& x) { return is_training() ? x + bias : x; }
  torch::Tensor bias;
};
TORCH_MODULE(PassThrough);

mr::ChainModel pass_through_model() {
  torch::manual_seed(4);
  mr::ChainModel model;
  const std::vector<int> widths{6, 16, 16, 16, 16};
  for (int l = 0; l < 5; ++l) {
    model.names.push_back("l" + std::to_string(l));
    if (l % 2 == 0)
      model.layers.emplace_back(torch::nn::Linear(widths[l], l == 4 ? 3 : 16));
    else
      model.layers.emplace_back(PassThrough(16));
  }
  model.loss = [](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::mse_loss(output, target);
  };
  return model;
}

// NCCL's rule, checked whatever the timing: no receive is posted over memory that a send the
// executor has not completed still reads (a real NCCL transfer would overwrite it).
class SendBufferRuleTransport final : public mr::Transport {
 public:
  explicit SendBufferRuleTransport(std::unique_ptr<mr::Transport> inner)
      : inner_(std::move(inner)) {}
  void post_send(int peer, const mr::MessageKey& key, const at::Tensor& tensor) override {
    const auto* begin = static_cast<const char*>(tensor.data_ptr());
    sending_[id(peer, key)] = {begin, begin + tensor.nbytes()};
    inner_->post_send(peer, key, tensor);
  }
  void post_recv(int peer, const mr::MessageKey& key, at::Tensor buffer) override {
    const auto* begin = static_cast<const char*>(buffer.data_ptr());
    const char* end = begin + buffer.nbytes();
    for (const auto& [send, range] : sending_)
      if (range.first < end && begin < range.second)
        broken.push_back("rank " + std::to_string(world_rank()) + " receives " +
                         describe(id(peer, key)) + " over the memory of its send " +
                         describe(send));
    inner_->post_recv(peer, key, std::move(buffer));
  }
  at::Tensor wait_recv(int peer, const mr::MessageKey& key) override {
    return inner_->wait_recv(peer, key);
  }
  void wait_send(int peer, const mr::MessageKey& key) override {
    sending_.erase(id(peer, key));
    inner_->wait_send(peer, key);
  }
  void wait_sends() override {
    sending_.clear();
    inner_->wait_sends();
  }
  void await_compute(const std::string& what) override { inner_->await_compute(what); }

  std::vector<std::string> broken;

 private:
  using Id = std::tuple<int, int, int, int>;  // peer, direction, stage, micro-batch
  static Id id(int peer, const mr::MessageKey& key) {
    return {peer, static_cast<int>(key.direction), key.stage, key.micro_batch};
  }
  static std::string describe(const Id& id) {
    return std::string(std::get<1>(id) == static_cast<int>(mr::Direction::Activation)
                           ? "the activation"
                           : "the gradient") +
           " of stage " + std::to_string(std::get<2>(id)) + ", micro-batch " +
           std::to_string(std::get<3>(id)) + " (peer " + std::to_string(std::get<0>(id)) + ")";
  }

  std::unique_ptr<mr::Transport> inner_;
  std::map<Id, std::pair<const char*, const char*>> sending_;
};

struct PassThroughOutcome {
  std::vector<torch::Tensor> weights;
  std::vector<double> validation_losses;
  std::vector<std::string> broken;
};

PassThroughOutcome train_pass_through(mplan::ReceivePosting posting, const std::vector<int>& gpus) {
  mr::SyntheticData data(6, 3, 4, 13);
  mr::ChainModel model = pass_through_model();
  const mplan::Plan plan = make_plan(5, {0, 1, 2, 3, 4}, gpus, Schedule::OneFOneBStar, 6, nullptr);
  SendBufferRuleTransport transport(make_test_transport(plan));
  mr::PipelineExecutor executor(model, plan, world_rank(), transport,
                                data.micro_batch(0, 0, false));
  const Programs programs = lower_both(plan, executor, posting, 1, 6);
  const mplan::Program& program = programs.training;
  const mplan::Program& validation = programs.validation;
  auto optimizers = sgd_per_stage(executor);
  PassThroughOutcome out;
  for (int step = 0; step < 3; ++step) {
    for (auto& o : optimizers) o->zero_grad();
    executor.run(program, [&](int i) { return data.micro_batch(step, i, false); });
    for (auto& o : optimizers) o->step();
    out.validation_losses.push_back(
        executor.evaluate(validation, [&](int i) { return data.micro_batch(step, i, true); }).sum);
  }
  for (int s : executor.local_stages())
    for (const torch::Tensor& p : executor.stage_parameters(s))
      out.weights.push_back(p.detach().clone());
  out.broken = transport.broken;
  return out;
}
}  // namespace

// A stage that passes its input through (dropout in validation, an identity) or its output's
// gradient (a bias add) gives back a view of a receive buffer: what it sends or hands to the next
// stage must not be overwritten by the next message placed there.
TEST(ReceiveArena, PassThroughStagesKeepTheirMessages) {
  if (world_size() < 2) GTEST_SKIP() << "no receives on one rank";
  const int p = world_size();
  // One stage a rank in turn (every message crosses ranks), and two neighbours on one rank
  // (hand-overs of pass-through outputs and gradients).
  for (const std::vector<int>& gpus :
       {std::vector<int>{0, 1 % p, 2 % p, 3 % p, 4 % p}, std::vector<int>{0, 1, 1, 0, 0}}) {
    const PassThroughOutcome upfront = train_pass_through(mplan::ReceivePosting::Upfront, gpus);
    const PassThroughOutcome arena = train_pass_through(mplan::ReceivePosting::Arena, gpus);
    for (const std::string& broken : arena.broken) ADD_FAILURE() << broken;
    ASSERT_EQ(upfront.weights.size(), arena.weights.size());
    for (std::size_t w = 0; w < arena.weights.size(); ++w)
      EXPECT_TRUE(torch::equal(upfront.weights[w], arena.weights[w])) << "parameter " << w;
    EXPECT_EQ(upfront.validation_losses, arena.validation_losses);
  }
}
