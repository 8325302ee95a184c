// Run under mpirun -np 1..4 (main() is in pipeline_equivalence_test.cpp): stages whose plans carry
// rematerialization/offloading sequences (Stage::sequence) must train exactly like unsplit
// training, recomputations must replay the random numbers and leave the buffers of their first
// forward, and a malformed sequence must stop every rank with an error naming the stage and op.

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/validate.hpp"
#include "remat/offload_replay.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "remat/rotor.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/exec/stage_sequence.hpp"
#include "runtime/model/model.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/train/two_weight_versions.hpp"
#include "schedule/gpipe.hpp"
#include "schedule/memory.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/search.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

namespace mr = madpipe::runtime;
namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mremat = madpipe::remat;

namespace {

using namespace madpipe::testing;

std::string L(int layer) { return std::to_string(layer); }

// F_f ck, F none up to the second last layer, F_l all; after dLoss the layers before l are
// recomputed with F all from the checkpoint (one layer: F ck, then F all after dLoss). For layers
// 0..2 it is "F0ck F1none F2all Loss dLoss B2 F0all F1all B1 B0".
std::string checkpoint_sequence(int f, int l) {
  if (f == l) return "F" + L(f) + "ck Loss dLoss F" + L(f) + "all B" + L(f);
  std::string s = "F" + L(f) + "ck";
  for (int k = f + 1; k < l; ++k) s += " F" + L(k) + "none";
  s += " F" + L(l) + "all Loss dLoss B" + L(l);
  for (int k = f; k < l; ++k) s += " F" + L(k) + "all";
  for (int k = l - 1; k >= f; --k) s += " B" + L(k);
  return s;
}

// Every layer F ck; after dLoss each layer is recomputed with F all right before its B.
std::string checkpoints_sequence(int f, int l) {
  std::string s;
  for (int k = f; k <= l; ++k) s += "F" + L(k) + "ck ";
  s += "Loss dLoss";
  for (int k = l; k >= f; --k) s += " F" + L(k) + "all B" + L(k);
  return s;
}

// Offloading without recomputation: F all, then the layer's input goes to the host (the stage
// input, then recorded outputs); each comes back right before its B.
std::string offload_sequence(int f, int l) {
  std::string s;
  for (int k = f; k <= l; ++k) s += "F" + L(k) + "all O" + L(k) + " ";
  s += "Loss dLoss";
  for (int k = l; k >= f; --k) s += " P" + L(k) + " B" + L(k);
  return s;
}

// Offloading and recomputation: the stage input is checkpointed, offloaded, prefetched and the
// first layer recomputed from the prefetched copy.
std::string offload_remat_sequence(int f, int l) {
  std::string s = "F" + L(f) + "ck O" + L(f);
  for (int k = f + 1; k <= l; ++k) s += " F" + L(k) + "ck";
  s += " Loss dLoss";
  for (int k = l; k > f; --k) s += " F" + L(k) + "all B" + L(k);
  s += " P" + L(f) + " F" + L(f) + "all B" + L(f);
  return s;
}

// ROTOR's optimal sequence on a made-up chain of the stage's length, with the smallest budget
// (in steps of 5 bytes below the store-all peak) it still fits.
std::string rotor_sequence(int f, int l, int salt) {
  const int n = l - f + 1;
  mremat::RematChain chain = mremat::make_remat_chain(n);
  chain.first_layer = f;
  chain.a[0] = chain.abar[0] = 40;
  for (int k = 1; k <= n; ++k) {
    chain.forward_ms[k] = 1.0 + (k + salt) % 3;
    chain.backward_ms[k] = 2.0 * chain.forward_ms[k];
    chain.a[k] = k < n ? 30 + 10 * ((k + salt) % 4) : 0;
    chain.delta[k] = chain.a[k];
    chain.abar[k] = chain.a[k] + 50 + 20 * ((k + salt) % 2);
  }
  const mremat::SequenceReplay all =
      mremat::replay_sequence(chain, mremat::store_all_sequence(chain));
  EXPECT_TRUE(all.valid) << all.problem;
  mremat::RematResult best = mremat::optimal_remat(chain, all.peak_bytes);
  EXPECT_TRUE(best.feasible);
  for (std::int64_t budget = all.peak_bytes - 5; budget > 0; budget -= 5) {
    mremat::RematResult result = mremat::optimal_remat(chain, budget);
    if (!result.feasible) break;
    best = std::move(result);
  }
  EXPECT_TRUE(best.replay.valid) << best.replay.problem;
  return mremat::to_string(best.sequence, chain);
}

// Forwards in a sequence beyond one per layer.
int recomputations(const std::string& sequence) {
  int forwards = 0, layers = 0;
  std::istringstream in(sequence);
  std::string token;
  while (in >> token) {
    if (token[0] == 'F') ++forwards;
    if (token[0] == 'B') ++layers;
  }
  return forwards - layers;
}

// Hand-written families, chosen per stage: 0 plain, 1..4 the sequences above.
std::string family_sequence(int family, int f, int l) {
  switch (family % 5) {
    case 1:
      return checkpoint_sequence(f, l);
    case 2:
      return checkpoints_sequence(f, l);
    case 3:
      return offload_sequence(f, l);
    case 4:
      return offload_remat_sequence(f, l);
    default:
      return "";
  }
}

std::vector<torch::Tensor> buffers_of(const mr::ChainModel& model, int first, int last) {
  std::vector<torch::Tensor> out;
  for (int l = first; l <= last; ++l)
    for (const torch::Tensor& b : model.layers[l].ptr()->buffers()) out.push_back(b);
  return out;
}

struct Comparison {
  double weights = 0;         // largest relative difference over this rank's stages
  double buffers = 0;         // same for buffers (batch-norm statistics)
  int recomputed_stages = 0;  // stages of the plan whose sequence recomputes a layer
};

// Trains `steps` SGD steps pipelined with the plan's sequences and unsplit; checks the losses.
Comparison train_and_compare(const std::string& model, int model_layers,
                             const std::vector<int>& first, const std::vector<int>& gpus,
                             Schedule schedule, const SequenceOf& sequence_of, int steps,
                             int micro_batches) {
  mr::ModelConfig config = small_config(model, model_layers);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel pipelined = mr::build_model(config);
  mr::ChainModel reference = mr::build_model(config);
  const int layers = static_cast<int>(pipelined.layers.size());
  const mplan::Plan plan = make_plan(layers, first, gpus, schedule, micro_batches, sequence_of);
  const mplan::Program program = mplan::lower(plan, micro_batches);
  EXPECT_EQ(mplan::dry_run(program), "");
  Comparison out;
  for (const ms::Stage& stage : plan.stages)
    if (recomputations(stage.sequence) > 0) ++out.recomputed_stages;

  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(pipelined, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  madpipe::testing::train_side_by_side(executor, reference, program, *data, steps, micro_batches);
  for (int s : executor.local_stages()) {
    const int f = plan.stages[s].first_layer, l = plan.stages[s].last_layer;
    out.weights = std::max(
        out.weights, relative_difference(executor.stage_parameters(s), reference.parameters(f, l)));
    out.buffers = std::max(
        out.buffers, relative_difference(buffers_of(pipelined, f, l), buffers_of(reference, f, l)));
  }
  // Validation runs plain forwards on stages with sequences, in evaluation mode.
  auto eval_batch = [&](int i) { return data->micro_batch(0, i, true); };
  mplan::LowerOptions forwards;
  forwards.micro_batches = micro_batches;
  forwards.train = false;
  const mr::StepLoss evaluated = executor.evaluate(mplan::lower(plan, forwards), eval_batch);
  if (evaluated.count > 0) {
    torch::NoGradGuard no_grad;
    double expected = 0;
    for (auto& layer : reference.layers) layer.ptr()->eval();
    for (int i = 0; i < micro_batches; ++i) {
      const mr::Batch b = eval_batch(i);
      torch::Tensor x = b.input;
      for (auto& layer : reference.layers) x = layer.forward(x);
      expected += reference.loss(x, b.target).item<double>();
    }
    for (auto& layer : reference.layers) layer.ptr()->train();
    EXPECT_EQ(evaluated.count, micro_batches);
    EXPECT_NEAR(evaluated.sum, expected, 1e-5 * std::abs(expected) + 1e-6);
  }
  return out;
}

struct Cut {
  std::vector<int> first, gpus;
  Schedule schedule;
};

// Contiguous cuts (one stage per rank) with three schedules, and one stage per layer round robin
// over the ranks, back and forth (non-contiguous), with a modulo schedule.
std::vector<Cut> cuts_for(int layers) {
  const int P = world_size();
  std::vector<Cut> cuts;
  std::vector<int> first, gpus;
  for (int g = 0; g < P; ++g) {
    first.push_back(g * layers / P);
    gpus.push_back(g);
  }
  for (Schedule s : {Schedule::OneFOneBStar, Schedule::OneFOneB, Schedule::GPipe})
    cuts.push_back({first, gpus, s});
  std::vector<int> all_first, all_gpus;
  for (int l = 0; l < layers; ++l) {
    all_first.push_back(l);
    const int lap = l / P, pos = l % P;
    all_gpus.push_back(lap % 2 == 0 ? pos : P - 1 - pos);
  }
  cuts.push_back({all_first, all_gpus, Schedule::Modulo});
  return cuts;
}

// Every hand-written family on every stage position, plain stages mixed in.
void check_hand_written(const std::string& model, int model_layers, int layers, int steps,
                        int micro_batches) {
  const std::vector<Cut> cuts = cuts_for(layers);
  for (std::size_t c = 0; c < cuts.size(); ++c) {
    for (int variant = 1; variant <= 4; ++variant) {
      const SequenceOf sequence_of = [&](int stage, int f, int l) {
        return family_sequence(stage + variant + static_cast<int>(c), f, l);
      };
      const Comparison r = train_and_compare(model, model_layers, cuts[c].first, cuts[c].gpus,
                                             cuts[c].schedule, sequence_of, steps, micro_batches);
      EXPECT_LT(r.weights, 1e-5) << model << " " << schedule_name(cuts[c].schedule) << " variant "
                                 << variant;
      EXPECT_LT(r.buffers, 1e-5) << model << " " << schedule_name(cuts[c].schedule) << " variant "
                                 << variant;
    }
  }
}

}  // namespace

TEST(RematSequences, HandWrittenMatchUnsplitTrainingMlp) { check_hand_written("mlp", 4, 5, 2, 4); }

TEST(RematSequences, HandWrittenMatchUnsplitTrainingGpt) { check_hand_written("gpt", 3, 5, 2, 3); }

// Batch norm: a recomputation must not move the running statistics a second time.
TEST(RematSequences, HandWrittenMatchUnsplitTrainingCnnWithBuffers) {
  check_hand_written("cnn", 3, 5, 2, 3);
}

TEST(RematSequences, RotorSequencesMatchUnsplitTraining) {
  struct ModelCase {
    std::string model;
    int model_layers, layers;
  };
  for (const ModelCase& m :
       {ModelCase{"mlp", 7, 8}, ModelCase{"gpt", 4, 6}, ModelCase{"cnn", 4, 6}}) {
    for (const Cut& cut : cuts_for(m.layers)) {
      if (cut.schedule == Schedule::Modulo) continue;  // one layer per stage: nothing to recompute
      const SequenceOf sequence_of = [](int stage, int f, int l) {
        return rotor_sequence(f, l, stage);
      };
      const Comparison r = train_and_compare(m.model, m.model_layers, cut.first, cut.gpus,
                                             cut.schedule, sequence_of, 2, 4);
      EXPECT_LT(r.weights, 1e-5) << m.model << " " << schedule_name(cut.schedule);
      EXPECT_LT(r.buffers, 1e-5) << m.model << " " << schedule_name(cut.schedule);
      // The budget is tight enough that ROTOR recomputes on stages of two layers or more.
      EXPECT_GT(r.recomputed_stages, 0) << m.model << " " << schedule_name(cut.schedule);
    }
  }
}

TEST(RematSequences, HandWrittenSequencesAreValidChainSequences) {
  // The runtime's rules agree with the chain model's replay on sequences without offloading.
  for (int f : {0, 3})
    for (int n = 1; n <= 4; ++n) {
      mremat::RematChain chain = mremat::make_remat_chain(n);
      chain.first_layer = f;
      for (const std::string& text :
           {checkpoint_sequence(f, f + n - 1), checkpoints_sequence(f, f + n - 1),
            rotor_sequence(f, f + n - 1, n)}) {
        const mremat::SequenceReplay replay =
            mremat::replay_sequence(chain, mremat::parse_remat_sequence(text, chain));
        EXPECT_TRUE(replay.valid) << text << ": " << replay.problem;
        ms::Stage stage;
        stage.id = 1;
        stage.first_layer = f;
        stage.last_layer = f + n - 1;
        stage.sequence = text;
        EXPECT_NO_THROW(mr::StageSequence{stage}) << text;
      }
    }
}

namespace {
// A chain with dropout after every hidden layer: stochastic forwards.
struct DropDenseImpl : torch::nn::Module {
  DropDenseImpl(int in, int out, double p)
      : linear(register_module("linear", torch::nn::Linear(in, out))),
        dropout(register_module("dropout", torch::nn::Dropout(p))) {}
  torch::Tensor forward(const torch::Tensor& x) { return dropout(torch::relu(linear(x))); }
  torch::nn::Linear linear;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(DropDense);

mr::ChainModel dropout_model() {
  torch::manual_seed(9);
  mr::ChainModel model;
  int in = 6;
  for (int l = 0; l < 4; ++l) {
    model.names.push_back("drop" + std::to_string(l));
    model.layers.emplace_back(DropDense(in, 16, 0.3));
    in = 16;
  }
  model.names.push_back("out");
  model.layers.emplace_back(torch::nn::Linear(in, 3));
  model.loss = [](const torch::Tensor& output, const torch::Tensor& target) {
    return torch::mse_loss(output, target);
  };
  return model;
}

// Weights of this rank's stages after pipelined training of the dropout model; the random
// generator is seeded with `seed` before each step.
std::vector<torch::Tensor> train_dropout(const Cut& cut, const SequenceOf& sequence_of,
                                         std::uint64_t seed) {
  mr::SyntheticData data(6, 3, 3, 7);
  mr::ChainModel model = dropout_model();
  const int layers = static_cast<int>(model.layers.size());
  const mplan::Plan plan = make_plan(layers, cut.first, cut.gpus, cut.schedule, 4, sequence_of);
  const mplan::Program program = mplan::lower(plan, 4);
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                data.micro_batch(0, 0, false));
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages())
    optimizers.push_back(std::make_unique<torch::optim::SGD>(executor.stage_parameters(s),
                                                             torch::optim::SGDOptions(0.1)));
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(seed + static_cast<std::uint64_t>(step));
    for (auto& o : optimizers) o->zero_grad();
    executor.run(program, [&](int i) { return data.micro_batch(step, i, false); });
    for (auto& o : optimizers) o->step();
  }
  std::vector<torch::Tensor> out;
  for (int s : executor.local_stages())
    for (const torch::Tensor& p : executor.stage_parameters(s)) out.push_back(p.detach().clone());
  return out;
}
}  // namespace

// Dropout draws random masks: a recomputation must draw the masks of the first forward (and
// leave the generator where it was), so a plan with recomputations trains exactly like the same
// plan without them.
TEST(RematSequences, RecomputedDropoutReplaysTheFirstForwardsMasks) {
  const std::vector<Cut> cuts = cuts_for(5);
  for (const Cut& cut : {cuts[1], cuts[3]}) {
    const std::vector<torch::Tensor> plain = train_dropout(cut, nullptr, 100);
    // Dropout matters: another seed gives other weights.
    EXPECT_GT(relative_difference(train_dropout(cut, nullptr, 200), plain), 1e-4)
        << schedule_name(cut.schedule);
    for (int variant = 1; variant <= 4; ++variant) {
      const SequenceOf sequence_of = [&](int stage, int f, int l) {
        return family_sequence(stage + variant, f, l);
      };
      EXPECT_LT(relative_difference(train_dropout(cut, sequence_of, 100), plain), 1e-6)
          << schedule_name(cut.schedule) << " variant " << variant;
    }
    const SequenceOf rotor = [](int stage, int f, int l) { return rotor_sequence(f, l, stage); };
    EXPECT_LT(relative_difference(train_dropout(cut, rotor, 100), plain), 1e-6)
        << schedule_name(cut.schedule) << " rotor";
  }
}

namespace {
// 2BW with sequences: the newest weights and both copies after `generations` updates. With
// `run_plain`, the same plan (same pattern) runs its stages plain: sequences change stage costs,
// hence the pattern, and with it which weight version each micro-batch sees.
std::vector<torch::Tensor> two_bw_weights(const Cut& cut, const SequenceOf& sequence_of,
                                          bool run_plain = false) {
  mr::ModelConfig config = small_config("mlp", 4);
  config.width = 12;
  config.seed = 5;
  mr::SyntheticData data(config.inputs, config.outputs, 3, 11);
  const int generations = 4;
  mr::ChainModel first_copy = mr::build_model(config);
  mr::ChainModel second_copy = mr::build_model(config);
  const int layers = static_cast<int>(first_copy.layers.size());
  mplan::Plan plan = make_plan(layers, cut.first, cut.gpus, cut.schedule, 4, sequence_of);
  if (run_plain)
    for (ms::Stage& stage : plan.stages) stage.sequence.clear();
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
  std::vector<torch::Tensor> out;
  for (int s : executor.local_stages()) {
    for (const torch::Tensor& p : versions.newest(s)) out.push_back(p.detach().clone());
    for (int copy : {0, 1})
      for (const torch::Tensor& p : executor.stage_parameters(s, copy))
        out.push_back(p.detach().clone());
  }
  return out;
}
}  // namespace

// Two weight versions: a recomputation in the backward part uses the copy of the micro-batch's
// first forward, so sequences change nothing (plain 2BW is checked against the update rule in
// pipeline_equivalence_test.cpp).
TEST(RematSequences, TwoWeightVersionsWithSequencesMatchPlain2BW) {
  const std::vector<Cut> cuts = cuts_for(5);
  for (const Cut& cut : {cuts[1], cuts[3]}) {
    for (int variant = 1; variant <= 4; ++variant) {
      const SequenceOf sequence_of = [&](int stage, int f, int l) {
        return family_sequence(stage + variant, f, l);
      };
      const std::vector<torch::Tensor> plain = two_bw_weights(cut, sequence_of, true);
      EXPECT_LT(relative_difference(two_bw_weights(cut, sequence_of), plain), 1e-5)
          << schedule_name(cut.schedule) << " variant " << variant;
    }
  }
}

namespace {
// The message of the error that building an executor for a plan whose last stage (on the last
// rank) carries `sequence` raises on this rank; empty when none.
std::string executor_error(const std::function<std::string(int, int)>& sequence) {
  mr::ModelConfig config = small_config("mlp", 4);
  mr::SyntheticData data(config.inputs, config.outputs, 3, 7);
  mr::ChainModel model = mr::build_model(config);
  const int layers = static_cast<int>(model.layers.size());
  const Cut cut = cuts_for(layers)[1];
  const int last_stage = static_cast<int>(cut.first.size()) - 1;
  const mplan::Plan plan = make_plan(
      layers, cut.first, cut.gpus, cut.schedule, 3,
      [&](int stage, int f, int l) {
        return stage == last_stage ? sequence(f, l) : checkpoint_sequence(f, l);
      },
      /*expect_valid=*/false);
  auto transport = make_test_transport(plan);
  try {
    mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                  data.micro_batch(0, 0, false));
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::InvalidInput);
    return e.what();
  }
  return "";
}

void expect_error(const std::function<std::string(int, int)>& sequence,
                  const std::vector<std::string>& parts) {
  const std::string message = executor_error(sequence);
  const std::string stage = "stage " + std::to_string(world_size() - 1);
  EXPECT_NE(message.find(stage), std::string::npos) << message;
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
}
}  // namespace

// Every rank checks every stage's sequence when the executor is built, so a bad sequence on the
// last rank's stage stops all ranks (no rank waits for a peer that failed).
TEST(RematSequences, MalformedSequencesGiveClearErrorsOnEveryRank) {
  // The last stage has two layers or more on 1..4 ranks (5 layers).
  auto forwards = [](int f, int l, const std::string& kind) {
    std::string s;
    for (int k = f; k <= l; ++k) s += "F" + L(k) + kind + " ";
    return s;
  };
  auto backwards = [](int f, int l) {
    std::string s;
    for (int k = l; k >= f; --k) s += " B" + L(k);
    return s;
  };
  // Unknown op.
  expect_error([&](int f, int l) { return forwards(f, l, "all") + "Lose dLoss" + backwards(f, l); },
               {"unknown op 'Lose'"});
  // A layer outside the stage (the last stage ends at layer 4).
  expect_error(
      [&](int f, int l) { return forwards(f, l, "all") + "F11all Loss dLoss" + backwards(f, l); },
      {"'F11all'", "outside the stage"});
  // B of a layer that was not recorded (F ck keeps only its output).
  expect_error([&](int f, int l) { return forwards(f, l, "ck") + "Loss dLoss" + backwards(f, l); },
               {"'B", "was not recorded"});
  // The input of a backward was offloaded and never prefetched.
  expect_error(
      [&](int f, int l) {
        return forwards(f, l, "all") + "O" + L(l) + " Loss dLoss" + backwards(f, l);
      },
      {"'B", "is offloaded", "P", "must bring it back first"});
  // F none on an input that only a recorded forward holds.
  expect_error(
      [&](int f, int l) {
        return "F" + L(f) + "all F" + L(f + 1) + "none " + forwards(f + 2, l, "all") +
               "Loss dLoss" + backwards(f, l);
      },
      {"op 2 'F", "none'", "only held by the recorded forward"});
  // A prefetch without an offload.
  expect_error(
      [&](int f, int l) { return forwards(f, l, "all") + "Loss dLoss P" + L(l) + backwards(f, l); },
      {"nothing to prefetch", "'P"});
  // No Loss.
  expect_error([&](int f, int l) { return forwards(f, l, "all") + "dLoss" + backwards(f, l); },
               {"exactly one Loss"});
  // dLoss before Loss.
  expect_error(
      [&](int f, int l) { return "dLoss " + forwards(f, l, "all") + "Loss" + backwards(f, l); },
      {"op 1 'dLoss'", "before Loss"});
  // Layers never backpropagated: their weights would get no gradient.
  expect_error([&](int f, int l) { return forwards(f, l, "ck") + "Loss dLoss"; },
               {"must end with only the gradient of the stage input"});
}

namespace {
struct TanhBlockImpl : torch::nn::Module {
  TanhBlockImpl()
      : first(register_module("first", torch::nn::Linear(64, 64))),
        second(register_module("second", torch::nn::Linear(64, 64))) {}
  torch::Tensor forward(const torch::Tensor& x) { return second(first(x).tanh()).tanh(); }
  torch::nn::Linear first, second;
};
TORCH_MODULE(TanhBlock);

// A chain of 4 tanh blocks (the first an identity when `identity_first`), with its stage.
struct TanhChain {
  mr::ChainModel model;
  ms::Stage stage;
};
TanhChain tanh_chain(const std::string& sequence, bool identity_first = false) {
  torch::manual_seed(5);
  TanhChain chain;
  for (int l = 0; l < 4; ++l) {
    if (l == 0 && identity_first)
      chain.model.layers.emplace_back(torch::nn::Identity());
    else
      chain.model.layers.emplace_back(TanhBlock());
    chain.model.names.push_back("block" + std::to_string(l));
  }
  chain.model.loss = [](const torch::Tensor& y, const torch::Tensor& t) {
    return torch::mse_loss(y, t);
  };
  chain.stage.first_layer = 0;
  chain.stage.last_layer = 3;
  chain.stage.sequence = sequence;
  return chain;
}

// Bytes held after the forward part of `sequence` on a chain of tanh blocks, and the input
// gradient its backward part gives.
std::pair<std::int64_t, torch::Tensor> forward_held_bytes(const std::string& sequence) {
  mr::install_cpu_memory_counter();
  TanhChain chain = tanh_chain(sequence);
  mr::ChainModel& model = chain.model;
  const mr::StageSequence sequence_of_stage(chain.stage);
  const torch::Tensor input = torch::randn({256, 64}), target = torch::randn({256, 64});
  mr::MemoryMeter meter(torch::kCPU);
  const std::int64_t before = meter.current_bytes();
  std::unique_ptr<mr::SequenceRun> run = sequence_of_stage.forward(
      model, input, true, [&](const torch::Tensor& y) { return model.loss(y, target); });
  const std::int64_t held = meter.current_bytes() - before;
  torch::Tensor delta = sequence_of_stage.backward(*run, mr::StageSequence::GradientFn());
  return {held, delta};
}
}  // namespace

TEST(RematSequences, OffloadsFreeWhatTheRecordedGraphsSaved) {
  if (world_rank() != 0) GTEST_SKIP() << "one rank suffices";
  const auto [stored, stored_delta] =
      forward_held_bytes("F0all F1all F2all F3all Loss dLoss B3 B2 B1 B0");
  // abar_1 and abar_2 (the graphs' saved tensors, not only the outputs) go to host memory.
  const auto [offloaded, offloaded_delta] =
      forward_held_bytes("F0all F1all O1 F2all O2 F3all Loss P2 P1 dLoss B3 B2 B1 B0");
  const std::int64_t layer_bytes = stored / 4;
  EXPECT_LT(offloaded, stored - layer_bytes) << "stored " << stored << " bytes";
  EXPECT_TRUE(torch::allclose(offloaded_delta, stored_delta, 1e-6, 1e-7));
}

// A layer whose output shares the stage input's storage (a view, or the input itself): an
// offload of that output copies it instead of freeing the storage, which is the receive buffer
// (or the arena every receive slot lives in) and must stay for the transport.
TEST(RematSequences, OffloadsNeverFreeTheStageInputsStorage) {
  if (world_rank() != 0) GTEST_SKIP() << "one rank suffices";
  TanhChain chain = tanh_chain("F0all F1all O1 F2all F3all Loss P1 dLoss B3 B2 B1 B0", true);
  mr::ChainModel& model = chain.model;
  const mr::StageSequence sequence_of_stage(chain.stage);
  const torch::Tensor input = torch::randn({8, 64}), target = torch::randn({8, 64});
  const torch::Tensor original = input.clone();
  const void* memory = input.data_ptr();
  std::unique_ptr<mr::SequenceRun> run = sequence_of_stage.forward(
      model, input, true, [&](const torch::Tensor& y) { return model.loss(y, target); });
  // Between the offload and its prefetch, the input's memory is where it was, with its values.
  EXPECT_EQ(input.storage().nbytes(), original.nbytes());
  EXPECT_EQ(input.data_ptr(), memory);
  EXPECT_TRUE(torch::equal(input, original));
  sequence_of_stage.backward(*run, mr::StageSequence::GradientFn());
  EXPECT_TRUE(torch::equal(input, original));
}

TEST(RematSequences, PrefetchesRunJustBeforeTheOpBeforeTheirReader) {
  ms::Stage stage;
  stage.first_layer = 0;
  stage.last_layer = 3;
  stage.sequence = "F0all F1all O1 F2all O2 F3all Loss P2 P1 dLoss B3 B2 B1 B0";
  const mr::StageSequence sequence(stage);
  const mremat::RematChain chain = mremat::make_remat_chain(4);
  EXPECT_EQ(mremat::to_string(sequence.ops(), chain),
            "F0all F1all O1 F2all O2 F3all Loss dLoss P2 B3 P1 B2 B1 B0");
}
