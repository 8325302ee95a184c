// Run under mpirun -np 1..4: TorchScript chains train exactly as their module computes. Tied
// parameters stay one tensor (gradients summed across the ranks that hold a copy), and random
// masks do not depend on the split: pipelined training equals a plain autograd loop over the
// unsplit module.

#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/layer_seed.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/script_model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/tied_gradients.hpp"

#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/script.h>

namespace mr = madpipe::runtime;
namespace mplan = madpipe::plan;

using namespace madpipe::testing;

namespace {
constexpr int kVocab = 11;

torch::jit::Module child(const std::string& type, const std::string& forward,
                         const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  torch::jit::Module module(type);
  module.register_attribute("training", c10::BoolType::get(), true);
  for (const auto& [name, value] : parameters)
    module.register_parameter(name, value.requires_grad_(true), false);
  module.define(forward);
  return module;
}

// `module` saved to a file of this process (torch.jit.save's format); returns its path.
std::string saved(const torch::jit::Module& module, const std::string& name) {
  const std::string path = scratch_file(name);
  module.save(path);
  return path;
}

// embed -> body -> head, where head's weight is embed's (one tensor): a language model with tied
// input and output embeddings. Written by every rank alike (same seed).
std::string write_tied_model() {
  torch::manual_seed(3);
  const torch::Tensor shared = torch::randn({kVocab, 8}) * 0.5;
  torch::jit::Module top("TiedLM");
  top.register_module("embed", child("Embed",
                                     "def forward(self, x):\n"
                                     "    return torch.embedding(self.weight, x)\n",
                                     {{"weight", shared}}));
  top.register_module("body",
                      child("Body",
                            "def forward(self, x):\n"
                            "    return torch.tanh(torch.matmul(x, self.weight) + self.bias)\n",
                            {{"weight", torch::randn({8, 8}) * 0.5}, {"bias", torch::zeros({8})}}));
  top.register_module("head", child("Head",
                                    "def forward(self, x):\n"
                                    "    return torch.matmul(x, self.weight.t())\n",
                                    {{"weight", shared}}));
  top.define(
      "def forward(self, x):\n"
      "    return self.head.forward(self.body.forward(self.embed.forward(x)))\n");
  return saved(top, "tied.pt");
}

// Three layers with dropout between matrix products, and a scaling between two children that
// runs in the layer before it.
std::string write_dropout_model() {
  torch::manual_seed(4);
  torch::jit::Module top("Dropped");
  for (const char* name : {"a", "b", "c"})
    top.register_module(name, child("Dense",
                                    "def forward(self, x):\n"
                                    "    y = torch.matmul(x, self.weight)\n"
                                    "    return torch.dropout(torch.relu(y), 0.4, self.training)\n",
                                    {{"weight", torch::randn({6, 6}) * 0.5}}));
  top.define(
      "def forward(self, x):\n"
      "    return self.c.forward(self.b.forward(self.a.forward(x) * 0.5))\n");
  return saved(top, "dropout.pt");
}

mr::Batch tokens_of(int step, int i) {
  torch::Generator generator = at::detail::createCPUGenerator(1000 * step + i);
  return {torch::randint(0, kVocab, {3, 5}, generator),
          torch::randint(0, kVocab, {3, 5}, generator)};
}

mr::Batch rows_of(int step, int i) {
  torch::Generator generator = at::detail::createCPUGenerator(1000 * step + i);
  return {torch::randn({4, 6}, generator), torch::randn({4, 6}, generator)};
}

// The largest and smallest value of each element over the ranks that pass `tensor` (the others
// pass none): equal when every copy holds the same bits.
bool equal_on_every_rank(const torch::Tensor* tensor, std::int64_t numel) {
  torch::Tensor high =
      tensor ? tensor->detach().to(torch::kDouble).contiguous()
             : torch::full({numel}, -std::numeric_limits<double>::infinity(), torch::kDouble);
  torch::Tensor low =
      tensor ? high.clone()
             : torch::full({numel}, std::numeric_limits<double>::infinity(), torch::kDouble);
  MPI_Allreduce(MPI_IN_PLACE, high.data_ptr(), static_cast<int>(numel), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, low.data_ptr(), static_cast<int>(numel), MPI_DOUBLE, MPI_MIN,
                MPI_COMM_WORLD);
  return torch::equal(high, low);
}

// Stage cuts of a 3-layer chain onto the world's ranks: contiguous, and (with 2 ranks and more)
// the first and last layer on one rank with the middle elsewhere.
std::vector<std::pair<std::vector<int>, std::vector<int>>> layouts() {
  const int P = world_size();
  std::vector<std::pair<std::vector<int>, std::vector<int>>> out;
  if (P == 1) return {{{0}, {0}}};
  if (P == 2) out.push_back({{0, 1}, {0, 1}});
  if (P >= 3) out.push_back({{0, 1, 2}, {0, 1, 2}});
  out.push_back({{0, 1, 2}, {0, 1, 0}});
  return out;
}

// A script chain pipelined by `plan` (this rank's layers), next to the same chain unsplit.
struct SideBySide {
  SideBySide(const std::string& path, mr::LossKind loss, const std::vector<int>& first,
             const std::vector<int>& gpus, int micro_batches, const mr::Batch& sample)
      : pipelined(mr::script_chain_model(path, loss)),
        reference(mr::script_chain_model(path, loss)),
        plan(make_plan(3, first, gpus, Schedule::OneFOneBStar, micro_batches, nullptr)),
        program(mplan::lower(plan, micro_batches)),
        transport(make_test_transport(plan)) {
    for (const auto& stage : plan.stages)
      for (int l = stage.first_layer; l <= stage.last_layer; ++l)
        if (stage.gpu == world_rank()) pipelined.materialize(l, torch::kCPU);
    for (int l = 0; l < reference.size(); ++l) reference.materialize(l, torch::kCPU);
    executor =
        std::make_unique<mr::PipelineExecutor>(pipelined, plan, world_rank(), *transport, sample);
  }
  mr::ChainModel pipelined, reference;
  mplan::Plan plan;
  mplan::Program program;
  std::unique_ptr<mr::Transport> transport;
  std::unique_ptr<mr::PipelineExecutor> executor;
};

// SGD optimizers over this rank's stages, each tensor in one optimizer only.
std::vector<std::unique_ptr<torch::optim::SGD>> optimizers_of(
    const mr::PipelineExecutor& executor) {
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  std::set<const c10::TensorImpl*> seen;
  for (int s : executor.local_stages()) {
    std::vector<torch::Tensor> parameters;
    for (const torch::Tensor& p : executor.stage_parameters(s))
      if (seen.insert(p.unsafeGetTensorImpl()).second) parameters.push_back(p);
    if (!parameters.empty())
      optimizers.push_back(std::make_unique<torch::optim::SGD>(
          parameters, torch::optim::SGDOptions(0.2).momentum(0.9)));
  }
  return optimizers;
}
}  // namespace

// Loaded once, the tied module's chain knows its tie; layers built on one process share the
// tensor, so the unsplit model holds one weight where the module holds one.
TEST(ScriptChain, TiedParametersAreOneTensorWithinAProcess) {
  const std::string path = write_tied_model();
  mr::ChainModel model = mr::script_chain_model(path, mr::LossKind::CrossEntropy);
  std::remove(path.c_str());
  ASSERT_EQ(model.tied_parameters.size(), 1u);
  const auto& group = model.tied_parameters[0];
  ASSERT_EQ(group.size(), 2u);
  EXPECT_EQ(group[0].layer, 0);
  EXPECT_EQ(group[1].layer, 2);
  EXPECT_EQ(group[0].name, "weight");
  for (int l = 0; l < model.size(); ++l) model.materialize(l, torch::kCPU);
  const torch::Tensor embed = model.layers[0].ptr()->parameters()[0];
  const torch::Tensor head = model.layers[2].ptr()->parameters()[0];
  EXPECT_EQ(embed.unsafeGetTensorImpl(), head.unsafeGetTensorImpl());
  // A layer dropped and built again joins the live tensor, whatever the file holds.
  {
    torch::NoGradGuard no_grad;
    embed.add_(1.0);
  }
  model.drop(2);
  model.materialize(2, torch::kCPU);
  EXPECT_EQ(model.layers[2].ptr()->parameters()[0].unsafeGetTensorImpl(),
            embed.unsafeGetTensorImpl());
}

// Synchronous pipelined training of the tied model equals the plain loop over the unsplit model
// (one tensor), and every copy of the tied weight holds the same bits after each step.
TEST(ScriptChain, TiedParametersTrainAsInTheUnsplitModel) {
  const std::string path = write_tied_model();
  const int micro_batches = 3, steps = 4;
  for (const auto& [first, gpus] : layouts()) {
    SideBySide run(path, mr::LossKind::CrossEntropy, first, gpus, micro_batches, tokens_of(0, 0));
    mr::ChainModel &pipelined = run.pipelined, &reference = run.reference;
    mr::PipelineExecutor& executor = *run.executor;
    mr::TiedGradients tied(pipelined, run.plan, world_rank(), MPI_COMM_WORLD);
    const bool split = std::set<int>{gpus.front(), gpus.back()}.size() > 1;
    EXPECT_EQ(tied.groups_across_ranks(), split ? 1 : 0);
    auto optimizers = optimizers_of(executor);
    torch::optim::SGD reference_optimizer(
        std::vector<torch::Tensor>{reference.layers[0].ptr()->parameters()[0],
                                   reference.layers[1].ptr()->parameters()[0],
                                   reference.layers[1].ptr()->parameters()[1]},
        torch::optim::SGDOptions(0.2).momentum(0.9));
    for (int step = 0; step < steps; ++step) {
      auto batch_of = [step](int i) { return tokens_of(step, i); };
      for (auto& o : optimizers) o->zero_grad();
      const mr::StepLoss loss = executor.run(run.program, batch_of);
      tied.sum();
      for (auto& o : optimizers) o->step();
      reference_optimizer.zero_grad();
      const mr::StepLoss expected = mr::run_unsplit(reference, micro_batches, batch_of);
      reference_optimizer.step();
      if (loss.count > 0) {
        EXPECT_NEAR(loss.sum, expected.sum, 1e-5 * std::abs(expected.sum)) << "step " << step;
      }
      // The copies of the tied weight: embed's on its rank, head's on its.
      const torch::Tensor* copy = nullptr;
      torch::Tensor mine;
      for (int l : {0, 2})
        if (pipelined.holds(l)) {
          mine = pipelined.layers[l].ptr()->parameters()[0];
          copy = &mine;
        }
      EXPECT_TRUE(equal_on_every_rank(copy, kVocab * 8)) << "step " << step;
    }
    EXPECT_LT(worst_stage_difference(executor, reference, run.plan), 1e-5);
  }
  std::remove(path.c_str());
}

// Dropout masks are a function of (seed, step, micro-batch, layer): the pipelined model, split
// any way, draws the masks the unsplit model draws, and the forward's scaling between two
// children runs where it belongs.
TEST(ScriptChain, DropoutMasksDoNotDependOnTheSplit) {
  const std::string path = write_dropout_model();
  const int micro_batches = 3, steps = 3;
  for (const auto& [first, gpus] : layouts()) {
    SideBySide run(path, mr::LossKind::Mse, first, gpus, micro_batches, rows_of(0, 0));
    mr::ChainModel& reference = run.reference;
    mr::PipelineExecutor& executor = *run.executor;
    auto optimizers = optimizers_of(executor);
    torch::optim::SGD reference_optimizer(reference.parameters(0, 2),
                                          torch::optim::SGDOptions(0.2).momentum(0.9));
    // The masks are drawn: unseeded, one step's loss changes from run to run; seeded, it is a
    // function of the key.
    auto step0 = [](int i) { return rows_of(0, i); };
    auto key0 = [](int i) { return mr::micro_batch_random_key(7, 0, i); };
    EXPECT_NE(mr::run_unsplit(reference, micro_batches, step0).sum,
              mr::run_unsplit(reference, micro_batches, step0).sum);
    EXPECT_EQ(mr::run_unsplit(reference, micro_batches, step0, key0).sum,
              mr::run_unsplit(reference, micro_batches, step0, key0).sum);
    reference_optimizer.zero_grad();
    for (int step = 0; step < steps; ++step) {
      auto batch_of = [step](int i) { return rows_of(step, i); };
      auto key_of = [step](int i) { return mr::micro_batch_random_key(7, step, i); };
      executor.seed_layers_by(key_of);
      for (auto& o : optimizers) o->zero_grad();
      const mr::StepLoss loss = executor.run(run.program, batch_of);
      for (auto& o : optimizers) o->step();
      reference_optimizer.zero_grad();
      const mr::StepLoss expected = mr::run_unsplit(reference, micro_batches, batch_of, key_of);
      reference_optimizer.step();
      if (loss.count > 0) {
        EXPECT_NEAR(loss.sum, expected.sum, 1e-5 * std::abs(expected.sum)) << "step " << step;
      }
    }
    EXPECT_LT(worst_stage_difference(executor, reference, run.plan), 1e-5);
  }
  std::remove(path.c_str());
}

// The chain computes the module's forward: the check passes for the module as saved and names
// the forward when the chain would compute something else.
TEST(ScriptChain, TheChainIsCheckedAgainstTheModulesForward) {
  const std::string path = write_dropout_model();
  mr::ChainModel model = mr::script_chain_model(path, mr::LossKind::Mse);
  const mr::Batch sample = rows_of(0, 0);
  EXPECT_EQ(error_of([&] { mr::check_script_chain(model, sample, path); }), "");
  model.reference_forward = [](const torch::Tensor& x) { return x * 0; };  // another function
  const std::string problem = error_of([&] { mr::check_script_chain(model, sample, path); });
  EXPECT_NE(problem.find(path + ": forward: the chain of layers computes another function than "
                                "the module's forward"),
            std::string::npos)
      << problem;
  std::remove(path.c_str());
}
