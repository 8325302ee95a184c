#include "runtime/trainer.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "partition/data_parallel.hpp"
#include "partition/infeasible.hpp"
#include "partition/planner.hpp"
#include "partition/replan.hpp"
#include "plan/program.hpp"
#include "plan/program_memory.hpp"
#include "plan/simulate.hpp"
#include "plan/trace.hpp"
#include "plan/validate.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/executor.hpp"
#include "runtime/layer_migration.hpp"
#include "runtime/memory_meter.hpp"
#include "runtime/mpi_session.hpp"
#include "runtime/nccl.hpp"
#include "runtime/optimizer.hpp"
#include "runtime/profiler.hpp"
#include "runtime/replicas.hpp"
#include "runtime/resume.hpp"
#include "runtime/saved_tensors.hpp"
#include "runtime/script_model.hpp"
#include "runtime/stop_request.hpp"
#include "runtime/sync_pipeline.hpp"
#include "runtime/torch_file.hpp"
#include "runtime/trace_recorder.hpp"
#include "runtime/train_planning.hpp"
#include "runtime/transport.hpp"
#include "runtime/two_weight_versions.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <mpi.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

// Collective: the mean loss over every rank's micro-batches (one all-reduce).
double mean_over_ranks(const madpipe::runtime::StepLoss& loss) {
  const std::vector<double> all =
      madpipe::runtime::all_reduce_sum({loss.sum, static_cast<double>(loss.count)});
  return all[0] / std::max(1.0, all[1]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string duration_text(double seconds) {
  const long total = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  return buf;
}

// Collective: gathers the recorded steps on rank 0, which writes <output_dir>/trace.json and
// prints measured against predicted period and memory.
// Bytes of one micro-batch's data (input and target), as the data source makes it.
std::int64_t micro_batch_bytes(const madpipe::runtime::DataSource& data) {
  const madpipe::runtime::Batch batch = data.micro_batch(0, 0, false);
  return static_cast<std::int64_t>(batch.input.nbytes() +
                                   (batch.target.defined() ? batch.target.nbytes() : 0));
}

// Weight-sized copies the run holds per weight: the weights and their gradients, the optimizer's
// state (AdamW: two moments; SGD: its momentum, if any), and 2BW's three extra copies.
int held_weight_copies(const madpipe::runtime::TrainConfig& c) {
  int copies = 2 + (c.optimizer == "adamw" ? 2 : (c.momentum != 0 ? 1 : 0));
  if (c.mode == madpipe::runtime::TrainingMode::TwoWeightVersions)
    copies += madpipe::runtime::kTwoWeightVersionsExtraCopies;
  return copies;
}

// The plan as this run holds it: its weight copies those of the run's optimizer and mode (a plan
// read with --plan may count fewer).
madpipe::plan::Plan as_held(const madpipe::runtime::TrainConfig& c,
                            const madpipe::plan::Plan& plan) {
  madpipe::plan::Plan held = plan;
  held.platform.weight_copies = held_weight_copies(c);
  return held;
}

// The lowered program's bound against --memory: the planner holds the pattern's steady state
// within it, and the warm-up and the transfers in flight may hold a few percent more.
void note_program_memory(const madpipe::runtime::TrainConfig& c, const madpipe::plan::Plan& plan,
                         const madpipe::plan::Program& program, std::int64_t data_bytes,
                         const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  const int held = held_weight_copies(c);
  if (plan.platform.weight_copies < held)
    say("note: the plan counts " + std::to_string(plan.platform.weight_copies) +
        " weight-sized copies per weight, this run holds " + std::to_string(held) + " (" +
        c.optimizer + (c.mode == runtime::TrainingMode::TwoWeightVersions ? ", 2bw" : "") +
        "): plan with --weight-copies " + std::to_string(held) + " to count them");
  const std::vector<plan::ProgramMemory> bounds =
      plan::program_memory(as_held(c, plan), program, data_bytes);
  std::string over;
  for (std::size_t g = 0; g < bounds.size(); ++g) {
    const plan::ProgramMemory& bound = bounds[g];
    if (bound.peak_bytes <= plan.platform.memory_bytes) continue;
    over += "\n  rank " + std::to_string(g) + ": " +
            format_bytes(static_cast<double>(bound.peak_bytes)) + " at " +
            (bound.peak_at >= 0 ? plan::to_string(program.per_gpu[g][bound.peak_at])
                                : std::string("an optimizer step"));
  }
  if (!over.empty())
    say("note: the lowered program may hold more than --memory (" +
        format_bytes(static_cast<double>(plan.platform.memory_bytes)) +
        ") on some ranks (the plan keeps its steady state within it; a lower --memory leaves "
        "room):" +
        over);
}

void write_trace(const madpipe::runtime::TrainConfig& c, const madpipe::plan::Plan& plan,
                 const madpipe::plan::Program& program, std::int64_t data_bytes,
                 const madpipe::runtime::TraceRecorder& recorder,
                 const madpipe::runtime::MemoryMeter& meter,
                 const madpipe::runtime::PipelineExecutor& executor, const torch::Device& device,
                 int steps, int rank, MPI_Comm pipeline,
                 const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  plan::TraceRankMemory memory;
  memory.peak_bytes = meter.peak_bytes();
  memory.peak_rss_bytes = runtime::peak_resident_bytes();
  if (meter.counting())
    memory.peak_at = executor.memory_peak().bytes >= memory.peak_bytes ? executor.memory_peak().at
                                                                       : "between programs";
  plan::Trace trace = recorder.gather(0, memory, pipeline);
  if (rank != 0) return;
  trace.profile = plan.profile;
  trace.algorithm = plan.algorithm;
  trace.device = device.str();
  trace.mode = madpipe::name_of(madpipe::runtime::kTrainingModeNames, c.mode);
  trace.micro_batches = c.micro_batches;
  trace.steps = steps;
  trace.predicted_period_ms = plan.predicted.period_ms;
  if (c.mode == madpipe::runtime::TrainingMode::Sync) {
    // A step as the runtime runs it: each op as soon as its inputs are there, in plan order.
    plan::SimOptions options;
    options.micro_batches = c.micro_batches;
    options.policy = plan::StartPolicy::Asap;
    trace.predicted_step_ms = plan::simulate(plan, options).step_ms;
  }
  // What the run's program holds at most on each rank (the memory model's terms, instruction by
  // instruction), which the tensors the rank tracks do not exceed.
  trace.predicted_memory_bytes.clear();
  for (const plan::ProgramMemory& bound :
       plan::program_memory(as_held(c, plan), program, data_bytes))
    trace.predicted_memory_bytes.push_back(bound.peak_bytes);
  const std::string path = (fs::path(c.output_dir) / "trace.json").string();
  plan::write_trace(trace, path);
  say("trace of " + std::to_string(steps) + " step" + (steps == 1 ? "" : "s") + " in " + path +
      " (madpipe show --trace " + path + " --svg trace.svg)\n" +
      plan::format_summary(plan::summarize(trace)));
}

// Collective: the checkpoint of `step`. Each rank that `writes` saves its stages; rank 0 writes
// the plan and the run's record, and marks the checkpoint complete once every rank saved.
void write_checkpoint(const madpipe::runtime::TrainConfig& c, int step,
                      const madpipe::plan::Plan& plan,
                      const std::vector<std::pair<int, madpipe::runtime::StageState>>& stages,
                      bool writes, int rank) {
  using namespace madpipe::runtime;
  if (writes)
    for (const auto& [s, state] : stages) save_stage(c.output_dir, step, s, state);
  if (rank == 0) {
    madpipe::plan::write_plan(plan, checkpoint_plan_path(c.output_dir, step).string());
    madpipe::write_file_atomically((checkpoint_dir(c.output_dir, step) / "run.json").string(),
                                   run_record(c, step));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every stage is on disk before the checkpoint is complete
  if (rank == 0) mark_complete(c.output_dir, step);
}

// <output-dir>/validation.pt: the samples every validation loss is the mean loss of, as
// torch.save({"inputs": X, "targets": Y}) would write them, to check a loss outside madpipe.
void write_validation_set(const madpipe::runtime::TrainConfig& c,
                          const madpipe::runtime::DataSource& data) {
  std::vector<torch::Tensor> inputs, targets;
  for (int i = 0; i < c.eval_micro_batches; ++i) {
    const madpipe::runtime::Batch batch = data.micro_batch(0, i, true);
    inputs.push_back(batch.input);
    targets.push_back(batch.target);
  }
  c10::Dict<std::string, at::Tensor> samples;
  samples.insert("inputs", torch::cat(inputs));
  samples.insert("targets", torch::cat(targets));
  madpipe::runtime::write_torch_file((fs::path(c.output_dir) / "validation.pt").string(),
                                     c10::IValue(samples));
}

// The last step of the 2BW window that starts at `first`: windows end where the run validates,
// checkpoints or ends, and hold at most kMaxWindow steps.
int window_end(const madpipe::runtime::TrainConfig& c, int first) {
  constexpr int kMaxWindow = 50;
  for (int step = first;; ++step)
    if (step == c.steps || step - first + 1 == kMaxWindow ||
        (c.eval_every > 0 && step % c.eval_every == 0) ||
        (c.checkpoint_every > 0 && step % c.checkpoint_every == 0))
      return step;
}

// Asynchronous training (2BW): the pattern runs without a flush over windows of steps (m
// micro-batches per update, one update per step), each window one program. A window ends with the
// pipeline drained: there the run validates, checks for non-finite losses and stop requests, and
// checkpoints; the next window starts from the newest weights (both versions). A program holds
// one window, and sends are released as they complete, so memory does not grow with the run.
// The rank of the last stage reports the loss of each update.
int train_two_weight_versions(const madpipe::runtime::TrainConfig& c,
                              const madpipe::plan::Plan& plan, madpipe::runtime::ChainModel& model,
                              const madpipe::runtime::LayerOutputs& outputs,
                              madpipe::runtime::PipelineExecutor& executor,
                              const madpipe::runtime::DataSource& data,
                              const madpipe::runtime::ResumePoint& resume,
                              const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  const int m = c.micro_batches;
  const std::vector<int> nca =
      schedule::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  const int deepest = *std::max_element(nca.begin(), nca.end());
  if (deepest > m)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "2bw needs at least as many micro-batches per update as the plan keeps in flight "
                "on a stage (" +
                    std::to_string(deepest) + "), got " + std::to_string(m));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool reports = plan.stages.back().gpu == rank;
  const torch::Device device = executor.device();
  // The second weight version: this rank's layers only, built as the first's were.
  runtime::ChainModel second;
  second.names = model.names;
  second.loss = model.loss;
  second.build_layer = model.build_layer;
  second.original_parameter_names = model.original_parameter_names;
  second.original_buffer_names = model.original_buffer_names;
  second.layers.resize(model.layers.size());
  const runtime::LayerFilter mine = runtime::layers_of_rank(plan, rank);
  for (int l = 0; l < second.size(); ++l)
    if (mine(l)) second.materialize(l, device);
  if (model.release_source) model.release_source();
  runtime::TwoWeightVersions versions(executor, second, m, [&](std::vector<torch::Tensor> p) {
    return madpipe::runtime::make_optimizer(c, std::move(p));
  });
  // A checkpoint holds the newest version and its optimizer; the executor's buffers.
  auto stage_states = [&] {
    std::vector<std::pair<int, runtime::StageState>> states;
    for (int s : executor.local_stages()) {
      runtime::StageState state = executor.stage_state(s, versions.optimizer(s));
      state.parameters = versions.newest(s);
      states.emplace_back(s, std::move(state));
    }
    return states;
  };
  int first_step = 1;
  if (resume.step > 0) {
    for (const auto& [s, state] : stage_states())
      runtime::load_stage(c.output_dir, resume.step, s, state, device);
    versions.synchronize_copies();
    first_step = resume.step + 1;
    // By the rank that appends to it: the truncation replaces the file, which another rank could
    // already have opened.
    if (reports)
      runtime::truncate_metrics((fs::path(c.output_dir) / "metrics.jsonl").string(), resume.step);
    say("resumed from the checkpoint of step " + std::to_string(resume.step));
  } else if (c.resume) {
    say("no checkpoint in " + c.output_dir + "; starting from step 1");
  }
  say("2bw: " + std::to_string(c.steps) + " updates of " + std::to_string(m) +
      " micro-batches; two weight versions per stage, no flush within a window of steps (it "
      "ends at validation, checkpoints and every 50 steps)");
  runtime::install_stop_handlers();
  std::ofstream metrics;
  if (reports)
    metrics.open(fs::path(c.output_dir) / "metrics.jsonl",
                 first_step > 1 ? std::ios::app : std::ios::trunc);
  const plan::Program eval_program = runtime::lower_checked(
      plan, runtime::lower_options(c, plan, outputs, c.eval_micro_batches, false));
  std::map<int, plan::Program> programs;  // by window length
  std::map<int, std::pair<double, int>> generation_loss;
  std::vector<nlohmann::ordered_json> window_lines;
  int first_bad_step = INT_MAX;
  int window_first = first_step;
  const auto started = Clock::now();
  bool evaluating = false;  // validation losses are not updates
  executor.on_loss([&](int i, double loss) {
    if (evaluating) return;
    if (!std::isfinite(loss)) first_bad_step = std::min(first_bad_step, window_first + i / m);
    auto& entry = generation_loss[i / m];
    entry.first += loss;
    if (++entry.second < m) return;
    const int step = window_first + i / m;
    const double elapsed = seconds_since(started);
    nlohmann::ordered_json line;
    line["step"] = step;
    line["loss"] = entry.first / m;
    line["samples_per_s"] =
        static_cast<double>(step - first_step + 1) * m * c.micro_batch_size / elapsed;
    line["seconds"] = elapsed;
    window_lines.push_back(line);
    if (!c.quiet && (step == 1 || step == c.steps || step % std::max(1, c.steps / 20) == 0)) {
      std::printf("step %d/%d  loss %.4f  (2bw, reported by rank %d)\n", step, c.steps,
                  entry.first / m, rank);
      std::fflush(stdout);
    }
    generation_loss.erase(i / m);
  });
  const int traced = std::min(c.trace_steps, c.steps - first_step + 1);
  runtime::MemoryMeter meter(device);
  MPI_Barrier(MPI_COMM_WORLD);
  meter.reset_peak();  // the run's peak, not the profiler's
  executor.reset_memory_peak();
  while (window_first <= c.steps) {
    const int last = window_end(c, window_first);
    const int length = last - window_first + 1;
    auto program = programs.find(length);
    if (program == programs.end()) {
      plan::LowerOptions options = runtime::lower_options(c, plan, outputs, length * m, true);
      options.update_micro_batches = m;
      program = programs.emplace(length, runtime::lower_checked(plan, options)).first;
      if (programs.size() == 1)
        note_program_memory(c, plan, program->second, micro_batch_bytes(data), say);
    }
    std::unique_ptr<runtime::TraceRecorder> recorder;
    if (window_first == first_step && traced > 0) {
      recorder = std::make_unique<runtime::TraceRecorder>(rank);
      recorder->number_micro_batches_by_update(m);
      recorder->record_until_step(std::min(traced, length));
      executor.trace_into(recorder.get());
    }
    executor.seed_layers_by([&c, window_first, m](int i) {
      return runtime::micro_batch_random_key(c.seed, window_first + i / m, i % m);
    });
    executor.run(program->second, [&](int i) {
      return runtime::on_device(data.micro_batch(window_first + i / m, i % m, false), device);
    });
    if (recorder) {
      MPI_Barrier(MPI_COMM_WORLD);
      write_trace(c, plan, program->second, micro_batch_bytes(data), *recorder, meter, executor,
                  device, std::min(traced, length), rank, MPI_COMM_WORLD, say);
      executor.trace_into(nullptr);
    }
    versions.synchronize_copies();  // the executor's model now holds the newest weights
    // Every rank learns of a non-finite loss and of a request to stop.
    int local[2] = {first_bad_step, -runtime::stop_signal()}, all[2];
    MPI_Allreduce(local, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all[0] != INT_MAX)
      throw Error(ErrorKind::Runtime, "", "on-nan",
                  "step " + std::to_string(all[0]) + ": the loss of a micro-batch (stage " +
                      std::to_string(plan.stages.size() - 1) + " on rank " +
                      std::to_string(plan.stages.back().gpu) +
                      ") is not finite; stopping (2bw applies each update within the pipeline, "
                      "so it cannot skip one)");
    if (c.eval_every > 0 && (last % c.eval_every == 0 || last == c.steps)) {
      evaluating = true;
      const runtime::StepLoss v = executor.evaluate(eval_program, [&](int i) {
        return runtime::on_device(data.micro_batch(0, i, true), device);
      });
      evaluating = false;
      const double val = mean_over_ranks(v);
      if (!window_lines.empty()) window_lines.back()["val_loss"] = val;
      say("step " + std::to_string(last) + "/" + std::to_string(c.steps) + "  val " +
          std::to_string(val).substr(0, 6));
    }
    for (const auto& line : window_lines) metrics << line.dump() << '\n';
    metrics.flush();
    window_lines.clear();
    const int stop = -all[1];
    if ((c.checkpoint_every > 0 && last % c.checkpoint_every == 0) || last == c.steps || stop != 0)
      write_checkpoint(c, last, plan, stage_states(), true, rank);
    if (stop != 0 && last < c.steps) {
      say(std::string("stopped by ") + runtime::signal_name(stop) + " after step " +
          std::to_string(last) + "; checkpoint written, continue with --resume");
      return 0;
    }
    window_first = last + 1;
  }
  // What the tensors of each rank held at most over the run (counted on the CPU, the CUDA
  // allocator's statistics on a GPU): it does not grow with the number of steps.
  std::vector<double> peaks(static_cast<std::size_t>(plan.platform.gpus), 0.0);
  peaks[static_cast<std::size_t>(rank)] = static_cast<double>(meter.peak_bytes());
  peaks = runtime::all_reduce_sum(peaks);
  std::string table = "tensor memory at most over the run, per rank:";
  for (std::size_t r = 0; r < peaks.size(); ++r)
    table += "\n  rank " + std::to_string(r) + ": " + format_bytes(peaks[r]) + " (" +
             std::to_string(static_cast<long long>(peaks[r])) + " bytes)";
  say(table);
  say("done in " + duration_text(seconds_since(started)) + "; " +
      std::to_string(versions.updates()) + " weight updates on rank " + std::to_string(rank) +
      "; plan, profile, metrics and checkpoints in " + c.output_dir);
  return 0;
}
}  // namespace

int madpipe::runtime::train(const TrainConfig& config, int* argc, char*** argv) {
  TrainConfig c = config;
  MpiSession session(argc, argv);
  const int rank = session.rank();
  auto say = [&](const std::string& line) {
    if (rank == 0 && !c.quiet) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  try {
    check_train_config(c);
    if (c.dry_run && session.size() != 1)
      throw Error(
          ErrorKind::InvalidInput, "", "dry-run",
          "a dry run is one process (no mpirun -np " + std::to_string(session.size()) + ")");
    if (!c.dry_run && session.size() != c.platform.gpus)
      throw Error(ErrorKind::InvalidInput, "", "gpus",
                  "--gpus is " + std::to_string(c.platform.gpus) + " but " +
                      std::to_string(session.size()) +
                      " MPI processes run (start them with mpirun -np " +
                      std::to_string(c.platform.gpus) + ")");
    const int pipeline_size = pipeline_ranks(c);
    torch::Device device = torch::kCPU;
    try {
      device = device_of(c.device, session.local_rank(), session.local_size());
      make_current(device);  // before any CUDA context, stream or communicator is made
      // One autograd engine from the first backward on (offloading stages need its hooks): a
      // switch later would start device threads with library workspaces of their own.
      SavedTensorCollector::supported();
    } catch (const Error& e) {
      if (!c.dry_run || e.kind() != ErrorKind::Unsupported) throw;
      say(std::string("dry run: ") + e.what() +
          "; profiling on the CPU instead (its times are not the device's)");
    }
    // A resumed run continues with the plan it checkpointed, whatever a new profile would say.
    ResumePoint resume;
    if (c.resume && !c.dry_run) {
      resume = find_resume_point(c.output_dir, rank, say);
      if (resume.step > 0) {
        if (c.plan.empty())
          c.plan = resume.plan_path;
        else
          check_resumed_plan(c.plan, resume.plan_path);
        check_resumed_settings(c.output_dir, resume.step, c);
      }
    }
    torch::set_num_threads(1);
    install_cpu_memory_counter();  // before the model, so that traces count its tensors
    // Data and model: identical on every rank (same seed). The model holds no layer until the
    // plan says which are this rank's: the profiler builds each layer for its measurement alone.
    Workload workload;
    ChainModel model;
    session.run_on_every_rank([&] {
      workload = make_workload(c);
      model = take_model(workload);
      if (workload.model.name == "script")
        check_script_chain(model, workload.data->micro_batch(0, 0, false), workload.model.script);
    });
    std::unique_ptr<DataSource> data = std::move(workload.data);
    say("data: " + data->description());
    if (!device.is_cpu()) say("devices: " + c.device + " (rank 0 on " + device.str() + ")");
    fs::create_directories(c.output_dir);

    Batch sample = on_device(data->micro_batch(0, 0, false), device);
    double cpu_sharing = 1;
    const Profile profile = agree_on_profile(c, model, sample, device, rank, say, &cpu_sharing);
    const plan::Plan first_plan = agree_on_plan(c, profile, rank, say);
    if (rank == 0) plan::write_plan(first_plan, (fs::path(c.output_dir) / "plan.json").string());
    say("plan: " + first_plan.algorithm + ", " + std::to_string(first_plan.stages.size()) +
        " stages on " + std::to_string(pipeline_size) + " ranks" +
        (c.replicas > 1 ? " x " + std::to_string(c.replicas) + " data-parallel replicas" : "") +
        ", " + std::to_string(first_plan.pattern.k) + "-periodic, predicted " +
        format_ms(first_plan.predicted.period_ms) + " per micro-batch");
    say(stage_summary(first_plan, model));

    if (c.dry_run) {
      say("dry run: profile and plan in " + c.output_dir + "; nothing trained");
      return 0;
    }
    if (rank == 0 && c.eval_every > 0) write_validation_set(c, *data);
    const int position = replica_layout(rank, session.size(), c.replicas).position;
    const LayerFilter mine = layers_of_rank(first_plan, position);
    for (int l = 0; l < model.size(); ++l)
      if (mine(l)) model.materialize(l, device);
    const LayerOutputs outputs = probe_layer_outputs(model, sample);
    sample = Batch{};  // not held through the run, whose memory the plan accounts for
    if (!model.tied_parameters.empty()) {
      const std::vector<TiedUse>& group = model.tied_parameters.front();
      const std::string tie = model.names[group.front().layer] + "." + group.front().name +
                              " and " + model.names[group.back().layer] + "." + group.back().name;
      if (c.mode == TrainingMode::TwoWeightVersions)
        throw Error(
            ErrorKind::Unsupported, "", "mode",
            "2bw does not train tied parameters yet (" + tie + " are one tensor); use --mode sync");
      if (c.replan_after > 0)
        throw Error(ErrorKind::Unsupported, "", "replan-after",
                    "re-planning does not move tied parameters yet (" + tie +
                        " are one tensor); leave --replan-after out");
      say("tied parameters: " + std::to_string(model.tied_parameters.size()) + " group(s), e.g. " +
          tie +
          "; trained as one tensor (gradients summed over the ranks "
          "that hold a copy)");
    }
    ReplicaGroups groups(replica_layout(rank, session.size(), c.replicas));
    const TransportKind transport =
        resolve_transport(c.transport, c.device, device, session.local_size(), nccl_built());
    if (transport == TransportKind::Nccl)
      groups.set_nccl(make_nccl_communicators(groups.pipeline(), groups.replicas(), device));
    say(std::string("transport: ") +
        (transport == TransportKind::Nccl ? "nccl (GPU to GPU)" : "mpi"));
    if (c.mode == TrainingMode::TwoWeightVersions) {
      std::unique_ptr<Transport> link = make_transport(c, first_plan, groups);
      PipelineExecutor executor(model, first_plan, rank, *link, outputs);
      return train_two_weight_versions(c, first_plan, model, outputs, executor, *data, resume, say);
    }
    if (c.replicas > 1) {
      say("replicas: rank r is GPU r % " + std::to_string(pipeline_size) + " of replica r / " +
          std::to_string(pipeline_size) + "; each stage averages its gradients over the " +
          std::to_string(c.replicas) + " replicas at every step (" +
          std::to_string(c.replicas * c.micro_batches) + " micro-batches per step in all)");
      const int per_node = c.platform.gpus_per_node;
      if (per_node > 0 && pipeline_size % per_node != 0 && per_node % pipeline_size != 0)
        say("note: pipelines of " + std::to_string(pipeline_size) + " ranks straddle nodes of " +
            std::to_string(per_node) + " ranks differently, so every link is planned at the " +
            "slowest bandwidth; --replicas such that the pipeline ranks divide --gpus-per-node "
            "(or " +
            "are a multiple of it) keeps pipeline neighbours on one node");
    }
    // Replica d runs micro-batches d*m .. d*m+m-1 of the step's replicas*m.
    const int first_micro_batch = groups.layout().replica * c.micro_batches;
    std::unique_ptr<SyncPipeline> pipeline =
        build_sync_pipeline(c, first_plan, model, outputs, groups, nullptr);
    if (model.release_source) model.release_source();  // this rank's layers are built
    if (c.plain_loop)
      say("plain loop: each step runs the unsplit model in one autograd loop, not the plan");
    auto checkpoint = [&](int step) {
      std::vector<std::pair<int, StageState>> states;
      for (const auto& [s, optimizer] : pipeline->stage_optimizers)
        states.emplace_back(s, pipeline->executor->stage_state(s, optimizer));
      // Replicas hold the same weights: the first one writes them.
      write_checkpoint(c, step, pipeline->plan, states, groups.layout().replica == 0, rank);
    };

    int first_step = 1;
    if (c.resume && resume.step > 0) {
      for (const auto& [s, optimizer] : pipeline->stage_optimizers)
        load_stage(c.output_dir, resume.step, s,
                   {pipeline->executor->stage_parameters(s), pipeline->executor->stage_buffers(s),
                    optimizer},
                   device);
      first_step = resume.step + 1;
      if (rank == 0)
        truncate_metrics((fs::path(c.output_dir) / "metrics.jsonl").string(), resume.step);
      say("resumed from the checkpoint of step " + std::to_string(resume.step));
    } else if (c.resume) {
      say("no checkpoint in " + c.output_dir + "; starting from step 1");
    }
    install_stop_handlers();
    const bool replanning = c.replan_after >= first_step && c.replan_after < c.steps;
    if (c.replan_after > 0 && !replanning)
      say("no re-planning: the run resumes after step " + std::to_string(c.replan_after));
    // The first step warms up (allocations, caches): it is left out of the measurements.
    const int first_measured =
        replanning && c.replan_after > first_step ? first_step + 1 : first_step;
    std::ofstream metrics;
    if (rank == 0)
      metrics.open(fs::path(c.output_dir) / "metrics.jsonl",
                   first_step > 1 ? std::ios::app : std::ios::trunc);
    // With re-planning, the trace records the steps after it: the plan the run continues with.
    const int first_traced = replanning ? c.replan_after + 1 : first_step;
    // The plain loop runs no program: nothing to trace.
    const int last_traced = c.plain_loop ? 0 : std::min(c.steps, first_traced + c.trace_steps - 1);
    MemoryMeter meter(device);
    std::unique_ptr<TraceRecorder> recorder;
    const auto started = Clock::now();
    double last_val = -1;
    for (int step = first_step; step <= c.steps; ++step) {
      if (step == first_traced && last_traced >= first_traced) {
        MPI_Barrier(MPI_COMM_WORLD);  // a common clock origin
        recorder = std::make_unique<TraceRecorder>(position);
        recorder->record_until_step(last_traced);
        pipeline->executor->trace_into(recorder.get());
        meter.reset_peak();
        pipeline->executor->reset_memory_peak();
      }
      if (recorder) recorder->begin_step(step);
      if (step == first_measured) pipeline->executor->reset_stage_times();
      for (auto& optimizer : pipeline->optimizers) optimizer->zero_grad();
      int bad_micro_batch = INT_MAX;
      pipeline->executor->on_loss([&](int i, double value) {
        if (!std::isfinite(value)) bad_micro_batch = std::min(bad_micro_batch, i);
      });
      pipeline->executor->seed_layers_by([&c, step, first_micro_batch](int i) {
        return micro_batch_random_key(c.seed, step, first_micro_batch + i);
      });
      auto batch_of = [&](int i) {
        return on_device(data->micro_batch(step, first_micro_batch + i, false), device);
      };
      const StepLoss local =
          c.plain_loop
              ? run_unsplit(model, c.micro_batches, batch_of,
                            [&c, step](int i) { return micro_batch_random_key(c.seed, step, i); })
              : pipeline->executor->run(pipeline->program, batch_of);
      if (pipeline->averager) pipeline->averager->finish();
      if (pipeline->tied) pipeline->tied->sum();
      if (step == first_step && c.receive_buffers == ReceiveBuffers::Arena && !c.plain_loop)
        report_receive_arena(*pipeline->executor, groups.layout(), say);
      if (step == first_step)
        note_program_memory(c, pipeline->plan, pipeline->program, micro_batch_bytes(*data), say);
      // Every rank learns of a non-finite loss or gradient, and of a request to stop.
      const StepHealth health = agree_on_health(*pipeline, bad_micro_batch);
      const bool skipped = !health.problem.empty();
      if (skipped && c.on_nan == OnNonFinite::Stop)
        throw Error(ErrorKind::Runtime, "", "on-nan",
                    "step " + std::to_string(step) + ": " + health.problem +
                        "; stopping (--on-nan skip skips such steps instead)");
      if (skipped) {
        say("step " + std::to_string(step) + ": " + health.problem +
            "; update skipped (--on-nan skip)");
        for (auto& optimizer : pipeline->optimizers) optimizer->zero_grad();
      } else {
        for (auto& optimizer : pipeline->optimizers) optimizer->step();
      }
      const double loss = mean_over_ranks(local);
      const bool eval = c.eval_every > 0 && (step % c.eval_every == 0 || step == c.steps);
      if (eval) {
        const StepLoss v = pipeline->executor->evaluate(pipeline->eval_program, [&](int i) {
          return on_device(data->micro_batch(0, i, true),
                           device);  // the same validation set every time
        });
        last_val = mean_over_ranks(v);
      }
      if (rank == 0) {
        const double elapsed = seconds_since(started);
        const double samples_per_s = static_cast<double>(step - first_step + 1) * c.replicas *
                                     c.micro_batches * c.micro_batch_size / elapsed;
        nlohmann::ordered_json line;
        line["step"] = step;
        line["loss"] = loss;
        if (eval) line["val_loss"] = last_val;
        if (skipped) line["skipped"] = true;
        line["samples_per_s"] = samples_per_s;
        line["seconds"] = elapsed;
        metrics << line.dump() << '\n';
        metrics.flush();
        if (eval || step == 1 || step % std::max(1, c.steps / 20) == 0) {
          char buf[256];
          std::snprintf(
              buf, sizeof buf, "step %d/%d  loss %.4f%s  %.1f samples/s  eta %s", step, c.steps,
              loss, eval ? ("  val " + std::to_string(last_val).substr(0, 6)).c_str() : "",
              samples_per_s,
              duration_text(elapsed / (step - first_step + 1) * (c.steps - step)).c_str());
          say(buf);
        }
      }
      if (recorder && step == last_traced) {
        recorder->stop();
        write_trace(c, pipeline->plan, pipeline->program, micro_batch_bytes(*data), *recorder,
                    meter, *pipeline->executor, device, last_traced - first_traced + 1, rank,
                    groups.pipeline(), say);
        pipeline->executor->trace_into(nullptr);
        recorder.reset();
      }
      if (replanning && step == c.replan_after &&
          replan(c, profile, cpu_sharing, step, first_measured, pipeline, model, outputs, groups,
                 rank, say))
        checkpoint(step);  // a resumed run must find the new plan's stages on disk
      else if ((c.checkpoint_every > 0 && step % c.checkpoint_every == 0) || step == c.steps)
        checkpoint(step);
      else if (health.stop_signal != 0)
        checkpoint(step);
      if (health.stop_signal != 0 && step < c.steps) {
        say(std::string("stopped by ") + signal_name(health.stop_signal) + " after step " +
            std::to_string(step) + "; checkpoint written, continue with --resume");
        return 0;
      }
    }
    say("done in " + duration_text(seconds_since(started)) + "; plan, profile, metrics and " +
        "checkpoints in " + c.output_dir);
    return 0;
  } catch (const std::exception& e) {
    session.abort(e.what(), 2);
  }
}
