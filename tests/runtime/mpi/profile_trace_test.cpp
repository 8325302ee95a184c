// Run under mpirun -np 1..4 (main() is in pipeline_equivalence_test.cpp): the layer profiler,
// TorchScript chains, and the trace a pipelined run records.

#include "mpi_test_support.hpp"

#include "plan/trace.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/device/trace_recorder.hpp"
#include "runtime/model/script_model.hpp"
#include "runtime/profile/profiler.hpp"

#include <cstdio>
#include <set>

#include <torch/script.h>

using namespace madpipe::testing;
namespace mr = madpipe::runtime;

namespace {
constexpr int kBatch = 4;

// linear (16 -> 32), then sin(2x) (autograd saves 2x, one activation), then linear (32 -> 3).
mr::ChainModel known_chain() {
  torch::manual_seed(3);
  mr::ChainModel model;
  model.names = {"linear", "sine", "out"};
  model.layers.emplace_back(torch::nn::Linear(16, 32));
  model.layers.emplace_back(
      torch::nn::Functional([](const torch::Tensor& x) { return (x * 2).sin(); }));
  model.layers.emplace_back(torch::nn::Linear(32, 3));
  model.loss = [](const torch::Tensor& y, const torch::Tensor& t) { return torch::mse_loss(y, t); };
  return model;
}

mr::Batch known_batch() { return {torch::randn({kBatch, 16}), torch::randn({kBatch, 3})}; }

std::string temporary_path(const std::string& name) { return scratch_file(name); }
}  // namespace

TEST(Profiler, MeasuresWeightsOutputsAndSavedBytesOfAKnownChain) {
  mr::ChainModel model = known_chain();
  mr::ProfilerOptions options;
  options.repeats = 3;
  const mr::ProfileMeasurement m = mr::profile_model(model, known_batch(), "known", options);
  const madpipe::Profile& p = m.profile;
  ASSERT_EQ(p.layers.size(), 3u);
  ASSERT_TRUE(m.memory_measured);
  EXPECT_EQ(p.input_bytes, kBatch * 16 * 4);
  EXPECT_EQ(p.batch, kBatch);
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.layers[0].weight_bytes, (16 * 32 + 32) * 4);
  EXPECT_EQ(p.layers[1].weight_bytes, 0);
  EXPECT_EQ(p.layers[0].output_bytes, kBatch * 32 * 4);
  EXPECT_EQ(p.layers[1].output_bytes, kBatch * 32 * 4);
  EXPECT_EQ(p.layers[2].output_bytes, 4);  // the loss
  // addmm keeps only its input and the weight; sin keeps its input 2x.
  EXPECT_EQ(p.layers[0].saved_bytes, 0);
  EXPECT_EQ(p.layers[1].saved_bytes, kBatch * 32 * 4);
  // The loss keeps the last layer's output (its input, the target, is the batch's).
  EXPECT_GE(p.layers[2].saved_bytes, kBatch * 3 * 4);
  for (const madpipe::Layer& layer : p.layers) {
    EXPECT_GT(layer.forward_ms, 0) << layer.name;
    EXPECT_GT(layer.backward_ms, 0) << layer.name;
    EXPECT_GE(layer.forward_workspace_bytes, 0);
    EXPECT_GE(layer.backward_workspace_bytes, 0);
  }
  ASSERT_EQ(m.spread.size(), 3u);
  for (const mr::LayerSpread& s : m.spread) EXPECT_GE(s.forward, 0);
  // The profiler leaves no gradients behind.
  for (const torch::Tensor& param : model.parameters(0, 2)) EXPECT_FALSE(param.grad().defined());
}

TEST(Profiler, SplitsTheBackwardsOfLayersThatDeferTheirWeightGradients) {
  // The MLP's layers are Linear (+ ReLU): B is the input gradient, W the weight's and bias', and
  // W keeps the Linear's input and the gradient of its output. Every layer of the CNN has a
  // convolution or a Linear that defers (its batch norms do not).
  mr::ModelConfig config = small_config("mlp", 2);
  std::unique_ptr<mr::DataSource> data = data_for(config);
  mr::ChainModel mlp = mr::build_model(config);
  mr::ProfilerOptions options;
  options.repeats = 3;
  const mr::Batch sample = data->micro_batch(0, 0, false);
  const std::int64_t batch = sample.input.size(0);
  const madpipe::Profile p = mr::profile_model(mlp, sample, "mlp", options).profile;
  ASSERT_EQ(p.layers.size(), 3u);
  const std::vector<std::int64_t> widths{config.inputs, config.width, config.width, config.outputs};
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    const madpipe::Layer& layer = p.layers[l];
    ASSERT_TRUE(layer.split_backward.has_value()) << layer.name;
    EXPECT_GT(layer.split_backward->weight_ms, 0) << layer.name;
    EXPECT_GE(layer.split_backward->input_ms, 0) << layer.name;
    EXPECT_NEAR(layer.split_backward->input_ms + layer.split_backward->weight_ms, layer.backward_ms,
                1e-9 * layer.backward_ms);
    EXPECT_EQ(layer.split_backward->kept_bytes, batch * (widths[l] + widths[l + 1]) * 4)
        << layer.name;
  }
  for (const torch::Tensor& param : mlp.parameters(0, 2)) EXPECT_FALSE(param.grad().defined());

  mr::ModelConfig cnn_config = small_config("cnn", 1);
  std::unique_ptr<mr::DataSource> images = data_for(cnn_config);
  mr::ChainModel cnn = mr::build_model(cnn_config);
  const madpipe::Profile c =
      mr::profile_model(cnn, images->micro_batch(0, 0, false), "cnn", options).profile;
  for (const madpipe::Layer& layer : c.layers)
    EXPECT_TRUE(layer.split_backward.has_value()) << layer.name;
}

TEST(Profiler, CountingAllocatorFollowsAllocationsAndFrees) {
  mr::install_cpu_memory_counter();
  mr::MemoryMeter meter(torch::kCPU);
  ASSERT_TRUE(meter.counting());
  const std::int64_t before = meter.current_bytes();
  meter.reset_peak();
  {
    torch::Tensor a = torch::empty({1000}, torch::kFloat);
    EXPECT_EQ(meter.current_bytes() - before, 4000);
    torch::Tensor b = torch::empty({500}, torch::kDouble);
    EXPECT_EQ(meter.current_bytes() - before, 8000);
  }
  EXPECT_EQ(meter.current_bytes(), before);
  EXPECT_EQ(meter.peak_bytes() - before, 8000);
  // An interval's peak restarts the raw statistics but not the run's peak.
  EXPECT_EQ(meter.interval_peak() - before, 8000);
  { torch::Tensor c = torch::empty({250}, torch::kFloat); }
  EXPECT_EQ(meter.interval_peak() - before, 1000);
  EXPECT_EQ(meter.interval_peak(), before);
  EXPECT_EQ(meter.peak_bytes() - before, 8000);
  meter.reset_peak();
  EXPECT_EQ(meter.peak_bytes(), before);
}

TEST(ScriptChain, TopLevelChildrenBecomeLayersSharingTheModulesTensors) {
  torch::jit::Module scale("ScaleLayer");
  scale.register_parameter("weight", torch::full({8}, 2.0).requires_grad_(true), false);
  scale.define("def forward(self, x):\n    return x * self.weight\n");
  torch::jit::Module shift("ShiftLayer");
  shift.register_parameter("bias", torch::ones({8}).requires_grad_(true), false);
  shift.define("def forward(self, x):\n    return (x + self.bias).tanh()\n");
  torch::jit::Module chain("TwoLayerChain");
  chain.register_module("scale", scale);
  chain.register_module("shift", shift);
  chain.define("def forward(self, x):\n    return self.shift.forward(self.scale.forward(x))\n");
  const std::string path = temporary_path("chain.pt");
  chain.save(path);

  mr::ScriptInput input;
  input.shape = {5, 8};
  mr::ScriptChain loaded = mr::load_script_chain(path, input, torch::kCPU);
  ASSERT_EQ(loaded.model.names, (std::vector<std::string>{"scale", "shift"}));
  EXPECT_EQ(loaded.sample.input.sizes(), (std::vector<std::int64_t>{5, 8}));
  EXPECT_EQ(loaded.sample.target.sizes(), (std::vector<std::int64_t>{5, 8}));
  // A step of SGD through the chain moves the TorchScript module's own parameters.
  std::vector<torch::Tensor> params = loaded.model.parameters(0, 1);
  ASSERT_EQ(params.size(), 2u);
  const torch::Tensor weight_before = params[0].detach().clone();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.5));
  torch::Tensor x = loaded.sample.input;
  for (auto& layer : loaded.model.layers) x = layer.forward(x);
  loaded.model.loss(x, loaded.sample.target).backward();
  sgd.step();
  EXPECT_FALSE(torch::equal(params[0], weight_before));

  mr::ProfilerOptions options;
  options.repeats = 2;
  const mr::ProfileMeasurement m = mr::profile_model(loaded.model, loaded.sample, "chain", options);
  ASSERT_EQ(m.profile.layers.size(), 2u);
  EXPECT_EQ(m.profile.layers[0].weight_bytes, 8 * 4);
  EXPECT_EQ(m.profile.layers[0].output_bytes, 5 * 8 * 4);
  std::remove(path.c_str());
}

TEST(ScriptChain, ErrorsNameTheFileAndTheProblem) {
  mr::ScriptInput input;
  input.shape = {2, 4};
  try {
    mr::load_script_chain("no_such_model.pt", input, torch::kCPU);
    FAIL() << "a missing file must throw";
  } catch (const madpipe::Error& e) {
    EXPECT_EQ(e.kind(), madpipe::ErrorKind::Io);
    EXPECT_EQ(e.file(), "no_such_model.pt");
  }
  torch::jit::Module flat("FlatModule");
  flat.define("def forward(self, x):\n    return x * 2\n");
  const std::string path = temporary_path("flat.pt");
  flat.save(path);
  try {
    mr::load_script_chain(path, input, torch::kCPU);
    FAIL() << "a module without children must throw";
  } catch (const madpipe::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no submodules"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(mr::parse_shape("2,x", "input-shape"), madpipe::Error);
  EXPECT_THROW(mr::parse_shape("2,0", "input-shape"), madpipe::Error);
  EXPECT_EQ(mr::parse_shape("8,3,32,32", "input-shape"), (std::vector<std::int64_t>{8, 3, 32, 32}));
}

TEST(Trace, RecordsEveryOpAndTransferOfAPipelinedRun) {
  const int P = world_size();
  const int micro_batches = 8, steps = 2;
  std::vector<int> first_layers, gpus;
  for (int g = 0; g < P; ++g) {
    first_layers.push_back(g);
    gpus.push_back(g);
  }
  const mplan::Plan plan =
      make_plan(P + 1, first_layers, gpus, Schedule::OneFOneBStar, micro_batches, nullptr);
  mr::ModelConfig config = small_config("mlp", P);
  auto data = data_for(config);
  mr::ChainModel model = mr::build_model(config);
  auto transport = make_test_transport(plan);
  mr::PipelineExecutor executor(model, plan, world_rank(), *transport,
                                data->micro_batch(0, 0, false));
  const mplan::Program program = mplan::lower(plan, micro_batches);
  MPI_Barrier(MPI_COMM_WORLD);
  mr::TraceRecorder recorder(world_rank());
  recorder.record_until_step(steps);
  executor.trace_into(&recorder);
  for (int step = 1; step <= steps + 1; ++step) {  // the last step is past the recorded ones
    recorder.begin_step(step);
    executor.run(program, [&](int i) { return data->micro_batch(step, i, false); });
  }
  // Every run's ops count in the stage times, those of the last (untraced) run included, whose
  // times are read only when asked for.
  for (int s : executor.local_stages()) {
    EXPECT_EQ(executor.stage_times()[s].forwards, micro_batches * (steps + 1));
    EXPECT_EQ(executor.stage_times()[s].backwards, micro_batches * (steps + 1));
    EXPECT_GT(executor.stage_times()[s].forward_ms, 0);
  }
  const mplan::Trace trace =
      recorder.gather(0, {0, 1000 + world_rank(), 0, "F 0." + std::to_string(world_rank())});
  if (world_rank() != 0) {
    EXPECT_TRUE(trace.ops.empty());
    return;
  }
  const int stages = static_cast<int>(plan.stages.size());
  EXPECT_EQ(trace.ranks, P);
  ASSERT_EQ(static_cast<int>(trace.ops.size()), 2 * stages * micro_batches * steps);
  EXPECT_EQ(static_cast<int>(trace.transfers.size()), 2 * (stages - 1) * micro_batches * steps);
  std::set<std::tuple<int, int, int, int>> seen;  // kind, stage, step, micro-batch
  for (const mplan::TraceOp& op : trace.ops) {
    EXPECT_LE(op.start_ms, op.end_ms);
    EXPECT_EQ(op.rank, plan.stages[op.stage].gpu);
    EXPECT_GE(op.step, 1);
    EXPECT_LE(op.step, steps);
    EXPECT_TRUE(seen.insert({static_cast<int>(op.kind), op.stage, op.step, op.micro_batch}).second);
  }
  // One rank runs one op at a time, and a micro-batch's backward follows its forward.
  for (int r = 0; r < P; ++r) {
    std::vector<mplan::TraceOp> mine;
    for (const mplan::TraceOp& op : trace.ops)
      if (op.rank == r) mine.push_back(op);
    std::sort(mine.begin(), mine.end(),
              [](const auto& a, const auto& b) { return a.start_ms < b.start_ms; });
    for (std::size_t k = 1; k < mine.size(); ++k) EXPECT_LE(mine[k - 1].end_ms, mine[k].start_ms);
    std::map<std::tuple<int, int, int>, double> forward_end;
    for (const mplan::TraceOp& op : mine) {
      if (op.kind == mplan::TraceOpKind::Forward)
        forward_end[{op.stage, op.step, op.micro_batch}] = op.end_ms;
      else
        EXPECT_LE(forward_end.at({op.stage, op.step, op.micro_batch}), op.start_ms);
    }
  }
  for (const mplan::TraceTransfer& t : trace.transfers) {
    EXPECT_EQ(t.from,
              plan.stages[t.stage + (t.kind == mplan::TraceTransferKind::Gradient ? 1 : 0)].gpu);
    EXPECT_EQ(t.to,
              plan.stages[t.stage + (t.kind == mplan::TraceTransferKind::Gradient ? 0 : 1)].gpu);
    EXPECT_GT(t.bytes, 0);
    EXPECT_LE(t.start_ms, t.end_ms);
  }
  ASSERT_EQ(static_cast<int>(trace.memory.size()), P);
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(trace.memory[r].peak_bytes, 1000 + r);
    EXPECT_EQ(trace.memory[r].peak_at, "F 0." + std::to_string(r));
  }
}
