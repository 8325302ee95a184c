// Runtime overhead on one rank: `madpipe train`'s executor running a one-GPU plan against a
// plain LibTorch loop (forward, loss, backward, optimizer step) on the same model and data.
// Prints samples/s of both (from the median step of each) and their ratio; run it as
// `mpirun -np 1 build/bench/runtime_bench [DEVICE [WIDTH [CONTEXT]]]` (DEVICE: cpu, the default,
// or cuda:N; WIDTH: the model's, 64 by default; CONTEXT: tokens per sample, 64 by default).

#include "core/chain.hpp"
#include "partition/planner.hpp"
#include "plan/program.hpp"
#include "runtime/comm/transport.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/device.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/profile/profiler.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <mpi.h>

using namespace madpipe;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  torch::set_num_threads(1);
  const int micro_batches = 8, steps = 42;
  const torch::Device device = runtime::device_of(argc > 1 ? argv[1] : "cpu");
  runtime::make_current(device);
  runtime::ModelConfig config;
  config.layers = 4;
  config.width = argc > 2 ? std::atoi(argv[2]) : 64;
  config.context = argc > 3 ? std::atoi(argv[3]) : 64;
  runtime::TextData data("/usr/share/common-licenses", config.context, 8, 1);
  config.vocab = data.vocab();
  runtime::ChainModel pipelined = runtime::build_model(config);
  runtime::ChainModel plain = runtime::build_model(config);
  runtime::move_model(pipelined, device);
  runtime::move_model(plain, device);
  // The device's queue is drained before each clock reading.
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  const runtime::Batch sample = runtime::on_device(data.micro_batch(0, 0, false), device);
  const Profile profile = runtime::profile_model(pipelined, sample, "gpt").profile;
  Platform platform;
  platform.gpus = 1;
  platform.memory_bytes = 1LL << 34;
  platform.bandwidth_bytes_per_ms = 1e9;
  const auto result = partition::make_plan(profile, platform);
  const plan::Program program = plan::lower(result.plan, micro_batches);
  auto transport = runtime::make_mpi_transport(static_cast<int>(result.plan.stages.size()));
  runtime::PipelineExecutor executor(pipelined, result.plan, 0, *transport, sample);
  torch::optim::AdamW pipelined_optimizer(pipelined.parameters(0, profile.layers.size() - 1));
  torch::optim::AdamW plain_optimizer(plain.parameters(0, profile.layers.size() - 1));

  using Clock = std::chrono::steady_clock;
  std::vector<double> pipelined_s, plain_s;  // per step: the medians resist a noisy machine
  for (int step = 0; step < steps; ++step) {
    auto batch_of = [&](int i) {
      return runtime::on_device(data.micro_batch(step, i, false), device);
    };
    auto run_pipelined = [&] {
      pipelined_optimizer.zero_grad();
      executor.run(program, batch_of);
      pipelined_optimizer.step();
    };
    auto run_plain = [&] {
      plain_optimizer.zero_grad();
      for (int i = 0; i < micro_batches; ++i) {
        const runtime::Batch b = batch_of(i);
        torch::Tensor x = b.input;
        for (auto& layer : plain.layers) x = layer.forward(x);
        (plain.loss(x, b.target) / micro_batches).backward();
      }
      plain_optimizer.step();
    };
    // Each goes first every other step, so that neither always follows the other's work.
    const bool pipelined_first = step % 2 == 0;
    double took_s[2];
    for (int turn = 0; turn < 2; ++turn) {
      const bool pipelined_turn = (turn == 0) == pipelined_first;
      sync();
      const auto start = Clock::now();
      if (pipelined_turn)
        run_pipelined();
      else
        run_plain();
      sync();
      took_s[pipelined_turn ? 0 : 1] = std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (step < 2) continue;  // warm-up
    pipelined_s.push_back(took_s[0]);
    plain_s.push_back(took_s[1]);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double pipelined_step = median(pipelined_s), plain_step = median(plain_s);
  const double samples = micro_batches * 8.0;
  std::printf(
      "one rank, gpt (4 blocks, width %d, context %d), %d micro-batches of 8, %s, 1 thread\n",
      config.width, config.context, micro_batches, device.str().c_str());
  std::printf("executor: %.1f samples/s  plain loop: %.1f samples/s  overhead: %+.1f%%\n",
              samples / pipelined_step, samples / plain_step,
              100.0 * (pipelined_step / plain_step - 1.0));
  MPI_Finalize();
  return 0;
}
