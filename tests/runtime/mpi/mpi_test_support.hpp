#pragma once

// Shared by the MPI tests: ranks, test plans with unit costs (and stage sequences), and
// pipelined training next to unsplit training on the same data.

#include "core/chain.hpp"
#include "core/error.hpp"
#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "plan/validate.hpp"
#include "remat/offload_replay.hpp"
#include "remat/remat_chain.hpp"
#include "remat/remat_sequence.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"
#include "runtime/comm/replicas.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "schedule/gpipe.hpp"
#include "schedule/modulo.hpp"
#include "schedule/one_f_one_b.hpp"
#include "schedule/search.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>
#include <unistd.h>

namespace madpipe::testing {

namespace ms = madpipe::schedule;
namespace mplan = madpipe::plan;
namespace mremat = madpipe::remat;

// The message of the madpipe::Error that f throws ("" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const madpipe::Error& e) {
    return e.what();
  }
  return "";
}

inline int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// A file name in the working directory that no other test process uses: ctest runs the rank
// counts of one test binary at the same time, in one directory.
inline std::string scratch_file(const std::string& name) {
  return "scratch_" + std::to_string(::getpid()) + "_" + name;
}

inline int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

enum class Schedule { OneFOneBStar, OneFOneB, GPipe, Modulo };

inline const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::OneFOneBStar:
      return "1f1b*";
    case Schedule::OneFOneB:
      return "1f1b";
    case Schedule::GPipe:
      return "gpipe";
    case Schedule::Modulo:
      return "modulo";
  }
  return "?";
}

// A plan for `layers` layers cut at `first_layers` onto `gpus`, with unit costs; stage s gets the
// sequence sequence_of(s, first, last), and the plan must pass the validator unless `expect_valid`
// is false. The platform has `platform_gpus` GPUs (0: one per rank). With `split_backward`, every
// layer's backward splits into B and W (its weight gradient): the plan's stages run W ops.
using SequenceOf = std::function<std::string(int stage, int first, int last)>;

inline mplan::Plan make_plan(int layers, const std::vector<int>& first_layers,
                             const std::vector<int>& gpus, Schedule kind, int micro_batches,
                             const SequenceOf& sequence_of, bool expect_valid = true,
                             int platform_gpus = 0, bool split_backward = false) {
  madpipe::Profile profile;
  profile.name = "test";
  profile.input_bytes = 1000;
  for (int l = 0; l < layers; ++l) {
    madpipe::Layer layer;
    layer.name = "l" + std::to_string(l);
    layer.forward_ms = 1.0 + 0.25 * (l % 3);
    layer.backward_ms = 2.0;
    layer.weight_bytes = 100;
    layer.output_bytes = 1000;
    if (split_backward) layer.split_backward = madpipe::SplitBackward{1.2, 0.8, 500};
    profile.layers.push_back(layer);
  }
  mplan::Plan plan;
  plan.profile = "test";
  plan.platform.gpus = platform_gpus > 0 ? platform_gpus : world_size();
  plan.platform.memory_bytes = 1LL << 40;
  plan.platform.bandwidth_bytes_per_ms = 1000;
  plan.algorithm = "test";
  const madpipe::ChainCosts costs(profile);
  plan.stages = ms::make_stages(costs, first_layers, gpus);
  // A stage's effective costs are the replay of its sequence (what the validator checks).
  for (ms::Stage& stage : plan.stages) {
    stage.sequence = sequence_of ? sequence_of(stage.id, stage.first_layer, stage.last_layer) : "";
    if (stage.sequence.empty()) continue;
    stage.remat = ms::RematStrategy::Rotor;
    const mremat::RematChain chain =
        mremat::stage_remat_chain(profile, stage.first_layer, stage.last_layer);
    mremat::RematSequence sequence;
    try {
      sequence = mremat::parse_remat_sequence(stage.sequence, chain);
    } catch (const madpipe::Error&) {
      continue;  // the malformed-sequence tests want the runtime's own message
    }
    if (stage.sequence.find('O') != std::string::npos) {
      stage.offload = ms::OffloadStrategy::Host;
      plan.platform.host_bandwidth_bytes_per_ms = 1000;
      const mremat::OffloadReplay r =
          mremat::replay_offload_sequence(chain, sequence, 1LL << 40, 1000);
      if (!r.valid) continue;  // the malformed-sequence tests want the runtime's own message
      stage.forward_ms = r.forward_ms;
      stage.backward_ms = r.backward_ms;
      stage.stored_bytes = r.stored_bytes;
      stage.workspace_bytes = r.peak_bytes_release_at_completion - r.stored_bytes;
    } else {
      const mremat::SequenceReplay r = mremat::replay_sequence(chain, sequence);
      if (!r.valid) continue;
      stage.forward_ms = r.forward_ms;
      stage.backward_ms = r.backward_ms;
      stage.stored_bytes = r.stored_bytes;
      stage.workspace_bytes = r.transient_bytes();
    }
  }
  switch (kind) {
    case Schedule::OneFOneBStar:
      plan.pattern = *ms::one_f_one_b_star(plan.stages, plan.platform, 1e3);
      break;
    case Schedule::OneFOneB:
      plan.pattern = ms::one_f_one_b(plan.stages, plan.platform);
      break;
    case Schedule::GPipe:
      plan.pattern = ms::gpipe(plan.stages, plan.platform, micro_batches);
      break;
    case Schedule::Modulo: {
      double load = ms::busiest_resource_ms(plan.stages, plan.platform);
      std::optional<ms::Pattern> pattern;
      for (double T = load; !pattern; T *= 1.25)
        pattern = ms::modulo_schedule(plan.stages, plan.platform, T);
      plan.pattern = *pattern;
      break;
    }
  }
  mplan::fill_predicted(plan, 0.0);
  const auto violations = mplan::validate(plan, profile);
  if (expect_valid) {
    EXPECT_TRUE(violations.empty()) << (violations.empty() ? "" : violations[0].problem);
  }
  return plan;
}

// Small built-in models (seed 42) for `layers` blocks; `model` is a name of kModelKindNames.
inline runtime::ModelConfig small_config(const std::string& model, int layers) {
  runtime::ModelConfig config;
  config.kind = value_named(runtime::kModelKindNames, model, "model", "model");
  config.layers = layers;
  config.width = model == "cnn" ? 4 : 16;
  config.image = 8;
  config.heads = 2;
  config.context = 8;
  config.vocab = 11;
  config.inputs = 6;
  config.outputs = 3;
  config.seed = 42;
  return config;
}

// Deterministic data for `config` (gpt: a tiny corpus written by the test; sets the vocabulary).
inline std::unique_ptr<runtime::DataSource> data_for(runtime::ModelConfig& config) {
  if (config.kind == runtime::ModelKind::Gpt) {
    const std::string path = scratch_file("corpus.txt");
    std::FILE* f = std::fopen(path.c_str(), "w");
    for (int i = 0; i < 400; ++i) std::fputs("abc defg hij\n" + (i % 5), f);
    std::fclose(f);
    auto text = std::make_unique<runtime::TextData>(path, config.context, 3, 7);
    std::remove(path.c_str());  // read whole
    config.vocab = text->vocab();
    return text;
  }
  if (config.kind == runtime::ModelKind::Cnn)
    return std::make_unique<runtime::SyntheticImages>(config.image, config.outputs, 3, 7);
  return std::make_unique<runtime::SyntheticData>(config.inputs, config.outputs, 3, 7);
}

// Largest difference between matching tensors, relative to the larger magnitude of `theirs`.
inline double relative_difference(const std::vector<torch::Tensor>& mine,
                                  const std::vector<torch::Tensor>& theirs) {
  EXPECT_EQ(mine.size(), theirs.size());
  double worst = 0;
  for (std::size_t p = 0; p < mine.size() && p < theirs.size(); ++p) {
    if (mine[p].numel() == 0) continue;
    const torch::Tensor a = mine[p].to(torch::kDouble), b = theirs[p].to(torch::kDouble);
    const double scale = b.abs().max().item<double>() + 1e-6;
    worst = std::max(worst, (a - b).abs().max().item<double>() / scale);
  }
  return worst;
}

// Runs `steps` SGD steps (lr 0.1, momentum 0.9) of `program` on `executor` and of the unsplit
// `reference` over the same micro-batches, checking that every step's loss agrees.
inline void train_side_by_side(runtime::PipelineExecutor& executor, runtime::ChainModel& reference,
                               const plan::Program& program, runtime::DataSource& data, int steps,
                               int micro_batches) {
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  for (int s : executor.local_stages()) {
    auto params = executor.stage_parameters(s);
    if (!params.empty())
      optimizers.push_back(
          std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9)));
  }
  const int layers = static_cast<int>(reference.layers.size());
  torch::optim::SGD reference_optimizer(reference.parameters(0, layers - 1),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    auto batch_of = [&](int i) { return data.micro_batch(step, i, false); };
    for (auto& o : optimizers) o->zero_grad();
    const runtime::StepLoss loss = executor.run(program, batch_of);
    for (auto& o : optimizers) o->step();
    reference_optimizer.zero_grad();
    const runtime::StepLoss expected = runtime::run_unsplit(reference, micro_batches, batch_of);
    reference_optimizer.step();
    if (loss.count > 0) {
      EXPECT_EQ(loss.count, micro_batches);
      EXPECT_NEAR(loss.sum, expected.sum, 1e-5 * std::abs(expected.sum) + 1e-6) << "step " << step;
    }
  }
}

// The largest relative_difference over the executor's stages between its weights and the
// reference's of the same layers.
inline double worst_stage_difference(const runtime::PipelineExecutor& executor,
                                     const runtime::ChainModel& reference, const plan::Plan& plan) {
  double worst = 0;
  for (int s : executor.local_stages())
    worst = std::max(worst, relative_difference(executor.stage_parameters(s),
                                                reference.parameters(plan.stages[s].first_layer,
                                                                     plan.stages[s].last_layer)));
  return worst;
}

// The NCCL transport over its emulation, owning its communicators (made over `pipeline` and
// `replicas`, with the plan's channels).
class EmulatedNcclTransport final : public runtime::Transport {
 public:
  EmulatedNcclTransport(const mplan::Plan& plan, MPI_Comm pipeline, MPI_Comm replicas,
                        double timeout_s)
      : comms_(runtime::make_nccl_communicators(pipeline, replicas, torch::kCPU, timeout_s)) {
    comms_->add_channels(mplan::message_channels(plan));
    inner_ = runtime::make_nccl_transport(*comms_);
  }
  void post_send(int peer, const runtime::MessageKey& key, const at::Tensor& tensor) override {
    inner_->post_send(peer, key, tensor);
  }
  void post_recv(int peer, const runtime::MessageKey& key, at::Tensor buffer) override {
    inner_->post_recv(peer, key, std::move(buffer));
  }
  at::Tensor wait_recv(int peer, const runtime::MessageKey& key) override {
    return inner_->wait_recv(peer, key);
  }
  void wait_send(int peer, const runtime::MessageKey& key) override {
    inner_->wait_send(peer, key);
  }
  void wait_sends() override { inner_->wait_sends(); }
  void await_compute(const std::string& what) override { inner_->await_compute(what); }
  runtime::NcclCommunicators& communicators() { return *comms_; }

 private:
  std::unique_ptr<runtime::NcclCommunicators> comms_;
  std::unique_ptr<runtime::Transport> inner_;  // destroyed first
};

// The transport of the pipeline tests: MPI, or the NCCL transport on its emulation when the suite
// runs with MADPIPE_NCCL_EMULATION=1 (the runtime.mpi.nccl.* tests).
inline std::unique_ptr<runtime::Transport> make_test_transport(const mplan::Plan& plan,
                                                               MPI_Comm pipeline = MPI_COMM_WORLD,
                                                               double timeout_s = 0,
                                                               MPI_Comm replicas = MPI_COMM_SELF) {
  if (runtime::nccl::emulation_requested())
    return std::make_unique<EmulatedNcclTransport>(plan, pipeline, replicas, timeout_s);
  return runtime::make_mpi_transport(static_cast<int>(plan.stages.size()), timeout_s, pipeline);
}

// The gradient all-reduce that goes with `transport` (over its communicators on NCCL).
inline std::unique_ptr<runtime::ReplicaReducer> make_test_reducer(runtime::Transport& transport,
                                                                  MPI_Comm replicas) {
  if (auto* nccl = dynamic_cast<EmulatedNcclTransport*>(&transport))
    return runtime::make_nccl_reducer(nccl->communicators());
  return runtime::make_mpi_reducer(replicas);
}

}  // namespace madpipe::testing
