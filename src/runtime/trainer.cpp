#include "runtime/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <mpi.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "partition/planner.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/data.hpp"
#include "runtime/executor.hpp"
#include "runtime/memory_meter.hpp"
#include "runtime/mpi_session.hpp"
#include "runtime/profiler.hpp"
#include "runtime/trace_recorder.hpp"
#include "runtime/transport.hpp"
#include "runtime/two_weight_versions.hpp"
#include "schedule/memory.hpp"
#include "schedule/program.hpp"
#include "schedule/trace.hpp"
#include "schedule/validate.hpp"

namespace fs = std::filesystem;

namespace {
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string duration_text(double seconds) {
  const long total = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  return buf;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const madpipe::runtime::TrainConfig& c,
                                                        std::vector<torch::Tensor> parameters) {
  if (c.optimizer == "adamw")
    return std::make_unique<torch::optim::AdamW>(
        parameters, torch::optim::AdamWOptions(c.learning_rate).weight_decay(c.weight_decay));
  if (c.optimizer == "sgd")
    return std::make_unique<torch::optim::SGD>(
        parameters,
        torch::optim::SGDOptions(c.learning_rate).momentum(c.momentum).weight_decay(c.weight_decay));
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "optimizer",
                       "unknown optimizer '" + c.optimizer + "' (valid: adamw, sgd)");
}

// Rank 0 plans (or reads the plan) and every rank gets the same plan.
madpipe::schedule::Plan agree_on_plan(const madpipe::runtime::TrainConfig& c,
                                      const madpipe::Profile& profile, int rank,
                                      const std::function<void(const std::string&)>& say) {
  std::string text, failure;
  if (rank == 0) {
    try {
      madpipe::schedule::Plan plan;
      if (!c.plan.empty()) {
        plan = madpipe::schedule::read_plan(c.plan);
        madpipe::schedule::throw_if_invalid(madpipe::schedule::validate(plan), c.plan);
      } else {
        madpipe::Platform platform;
        platform.gpus = c.gpus;
        platform.memory_bytes = madpipe::parse_bytes(c.memory, "memory");
        platform.bandwidth_bytes_per_ms = madpipe::parse_bandwidth(c.bandwidth, "bandwidth");
        platform.weight_copies = c.weight_copies;
        madpipe::partition::PlannerOptions options;
        options.algorithm = madpipe::partition::algorithm_from_string(c.algorithm);
        const auto result = madpipe::partition::make_plan(profile, platform, options);
        if (!result.feasible) throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "memory", result.reason);
        plan = result.plan;
        for (const std::string& note : result.notes) say("planner note: " + note);
        say("planned with " + c.algorithm + " in " + std::to_string(result.planning_seconds).substr(0, 5) + " s");
      }
      if (plan.platform.gpus != c.gpus)
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.plan, "/platform/gpus",
                             "the plan is for " + std::to_string(plan.platform.gpus) +
                                 " GPUs but --gpus is " + std::to_string(c.gpus));
      if (plan.stages.back().last_layer + 1 != static_cast<int>(profile.layers.size()))
        throw madpipe::Error(madpipe::ErrorKind::InvalidInput, c.plan, "/stages",
                             "the plan covers " + std::to_string(plan.stages.back().last_layer + 1) +
                                 " layers but the model has " + std::to_string(profile.layers.size()));
      std::ostringstream out;
      madpipe::schedule::write_plan(plan, out);
      text = out.str();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  failure = madpipe::runtime::broadcast_string(failure, 0);
  if (!failure.empty()) throw madpipe::Error(madpipe::ErrorKind::InvalidInput, "", "", failure);
  text = madpipe::runtime::broadcast_string(text, 0);
  return madpipe::schedule::plan_from_json(nlohmann::json::parse(text), "plan");
}

std::string stage_summary(const madpipe::schedule::Plan& plan,
                          const madpipe::runtime::ChainModel& model) {
  std::ostringstream out;
  for (const auto& stage : plan.stages)
    out << "  stage " << stage.id << ": layers " << model.names[stage.first_layer] << ".."
        << model.names[stage.last_layer] << " on rank " << stage.gpu << '\n';
  return out.str();
}
// Every rank builds the whole model (same seed, same weights) and keeps only its stages' layers:
// the others' parameters and buffers are released, so that a rank's memory is its share.
void release_other_layers(madpipe::runtime::ChainModel& model, const madpipe::schedule::Plan& plan,
                          int rank) {
  torch::NoGradGuard no_grad;
  for (const auto& stage : plan.stages) {
    if (stage.gpu == rank) continue;
    for (int l = stage.first_layer; l <= stage.last_layer; ++l) {
      for (torch::Tensor p : model.layers[l].ptr()->parameters())
        p.set_data(torch::empty({0}, p.options()));
      for (torch::Tensor b : model.layers[l].ptr()->buffers())
        b.set_data(torch::empty({0}, b.options()));
    }
  }
}

// Collective: gathers the recorded steps on rank 0, which writes <output_dir>/trace.json and
// prints measured against predicted period and memory.
void write_trace(const madpipe::runtime::TrainConfig& c, const madpipe::schedule::Plan& plan,
                 const madpipe::runtime::TraceRecorder& recorder,
                 const madpipe::runtime::MemoryMeter& meter, int steps, int rank,
                 const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  schedule::Trace trace =
      recorder.gather(0, meter.peak_bytes(), runtime::peak_resident_bytes());
  if (rank != 0) return;
  trace.profile = plan.profile;
  trace.algorithm = plan.algorithm;
  trace.device = "cpu";
  trace.mode = c.mode;
  trace.micro_batches = c.micro_batches;
  trace.steps = steps;
  trace.predicted_period_ms = plan.predicted.period_ms;
  trace.predicted_memory_bytes = plan.predicted.memory_bytes;
  const std::string path = (fs::path(c.output_dir) / "trace.json").string();
  schedule::write_trace(trace, path);
  say("trace of " + std::to_string(steps) + " step" + (steps == 1 ? "" : "s") + " in " + path +
      " (madpipe show --trace " + path + " --svg trace.svg)\n" +
      schedule::format_summary(schedule::summarize(trace)));
}

// Asynchronous training (2BW): the pattern runs without a flush over steps x m micro-batches,
// m = micro-batches per update. The rank of the last stage reports the loss of each update.
int train_two_weight_versions(const madpipe::runtime::TrainConfig& c,
                              const madpipe::schedule::Plan& plan,
                              const madpipe::runtime::ModelConfig& model_config,
                              madpipe::runtime::PipelineExecutor& executor,
                              const madpipe::runtime::DataSource& data,
                              const std::function<void(const std::string&)>& say) {
  using namespace madpipe;
  const int m = c.micro_batches;
  const std::vector<int> nca =
      schedule::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  const int deepest = *std::max_element(nca.begin(), nca.end());
  if (deepest > m)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "2bw needs at least as many micro-batches per update as the plan keeps in flight "
                "on a stage (" + std::to_string(deepest) + "), got " + std::to_string(m));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool reports = plan.stages.back().gpu == rank;
  runtime::ChainModel second = runtime::build_model(model_config);
  runtime::TwoWeightVersions versions(executor, second, m, [&](std::vector<torch::Tensor> p) {
    return make_optimizer(c, std::move(p));
  });
  release_other_layers(second, plan, rank);
  const schedule::Program program = schedule::lower(plan, c.steps * m);
  const std::string stuck = schedule::dry_run(program);
  if (!stuck.empty()) throw Error(ErrorKind::Internal, "", "plan", "the lowered plan deadlocks:\n" + stuck);
  say("2bw: " + std::to_string(c.steps) + " updates of " + std::to_string(m) +
      " micro-batches without a flush; two weight versions per stage");
  std::ofstream metrics;
  if (reports) metrics.open(fs::path(c.output_dir) / "metrics.jsonl", std::ios::trunc);
  std::map<int, std::pair<double, int>> generation_loss;
  const auto started = Clock::now();
  executor.on_loss([&](int i, double loss) {
    auto& entry = generation_loss[i / m];
    entry.first += loss;
    if (++entry.second < m) return;
    const int step = i / m + 1;
    const double elapsed = seconds_since(started);
    nlohmann::ordered_json line;
    line["step"] = step;
    line["loss"] = entry.first / m;
    line["samples_per_s"] = static_cast<double>(step) * m * c.micro_batch_size / elapsed;
    line["seconds"] = elapsed;
    metrics << line.dump() << '\n';
    metrics.flush();
    if (!c.quiet && (step == 1 || step == c.steps || step % std::max(1, c.steps / 20) == 0)) {
      std::printf("step %d/%d  loss %.4f  (2bw, reported by rank %d)\n", step, c.steps,
                  entry.first / m, rank);
      std::fflush(stdout);
    }
    generation_loss.erase(i / m);
  });
  const int traced = std::min(c.trace_steps, c.steps);
  runtime::MemoryMeter meter(torch::kCPU);
  MPI_Barrier(MPI_COMM_WORLD);
  runtime::TraceRecorder recorder(rank);
  if (traced > 0) {
    recorder.number_micro_batches_by_update(m);
    recorder.record_until_step(traced);
    executor.trace_into(&recorder);
    meter.reset_peak();
  }
  executor.run(program, [&](int i) { return data.micro_batch(i / m + 1, i % m, false); });
  MPI_Barrier(MPI_COMM_WORLD);
  if (traced > 0) write_trace(c, plan, recorder, meter, traced, rank, say);
  say("done in " + duration_text(seconds_since(started)) + "; " + std::to_string(versions.updates()) +
      " weight updates on rank 0; plan, profile and metrics in " + c.output_dir);
  return 0;
}
}  // namespace

int madpipe::runtime::train(const TrainConfig& config, int* argc, char*** argv) {
  TrainConfig c = config;
  // A resumed run continues with the plan it checkpointed, whatever a new profile would say.
  const fs::path saved_plan = fs::path(c.output_dir) / "plan.json";
  if (c.resume && c.plan.empty() && read_latest(c.output_dir) > 0 && fs::exists(saved_plan))
    c.plan = saved_plan.string();
  MpiSession session(argc, argv);
  const int rank = session.rank();
  auto say = [&](const std::string& line) {
    if (rank == 0 && !c.quiet) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  try {
    if (session.size() != c.gpus)
      throw Error(ErrorKind::InvalidInput, "", "gpus",
                  "--gpus is " + std::to_string(c.gpus) + " but " + std::to_string(session.size()) +
                      " MPI processes run (start them with mpirun -np " + std::to_string(c.gpus) + ")");
    torch::set_num_threads(1);
    install_cpu_memory_counter();  // before the model, so that traces count its tensors
    // Data and model: identical on every rank (same seed), each rank keeps its stages.
    Workload workload = make_workload(c);
    const ModelConfig& model_config = workload.model;
    std::unique_ptr<DataSource> data = std::move(workload.data);
    say("data: " + data->description());
    ChainModel model = build_model(model_config);
    fs::create_directories(c.output_dir);

    const Batch sample = data->micro_batch(0, 0, false);
    std::string profile_text;
    if (rank == 0) {
      const Profile profile = profile_model(model, sample, c.model).profile;
      profile_text = profile_to_json(profile).dump(1);
      madpipe::write_file_atomically((fs::path(c.output_dir) / "profile.json").string(), profile_text + "\n");
      say("profiled " + std::to_string(profile.layers.size()) + " layers on " + profile.device);
    }
    profile_text = broadcast_string(profile_text, 0);
    const Profile profile = profile_from_json(nlohmann::json::parse(profile_text), "profile");
    const schedule::Plan plan = agree_on_plan(c, profile, rank, say);
    if (rank == 0) schedule::write_plan(plan, (fs::path(c.output_dir) / "plan.json").string());
    say("plan: " + plan.algorithm + ", " + std::to_string(plan.stages.size()) + " stages on " +
        std::to_string(c.gpus) + " ranks, " + std::to_string(plan.pattern.k) +
        "-periodic, predicted " + format_ms(plan.predicted.period_ms) + " per micro-batch");
    say(stage_summary(plan, model));

    const schedule::Program program = schedule::lower(plan, c.micro_batches);
    const schedule::Program eval_program = schedule::lower(plan, c.eval_micro_batches);
    for (const schedule::Program* p : {&program, &eval_program}) {
      const std::string stuck = schedule::dry_run(*p);
      if (!stuck.empty()) throw Error(ErrorKind::Internal, "", "plan", "the lowered plan deadlocks:\n" + stuck);
    }
    std::unique_ptr<Transport> transport = make_mpi_transport(static_cast<int>(plan.stages.size()));
    PipelineExecutor executor(model, plan, rank, *transport, sample);
    release_other_layers(model, plan, rank);
    if (c.mode == "2bw") return train_two_weight_versions(c, plan, model_config, executor, *data, say);
    if (c.mode != "sync")
      throw Error(ErrorKind::InvalidInput, "", "mode", "unknown mode '" + c.mode + "' (valid: sync, 2bw)");
    std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
    std::vector<std::pair<int, torch::optim::Optimizer*>> stage_optimizers;
    for (int s : executor.local_stages()) {
      std::vector<torch::Tensor> parameters = executor.stage_parameters(s);
      torch::optim::Optimizer* optimizer = nullptr;
      if (!parameters.empty()) {
        optimizers.push_back(make_optimizer(c, parameters));
        optimizer = optimizers.back().get();
      }
      stage_optimizers.emplace_back(s, optimizer);
    }
    auto checkpoint = [&](int step) {
      for (const auto& [s, optimizer] : stage_optimizers)
        save_stage(c.output_dir, step, s, executor.stage_parameters(s), optimizer);
      MPI_Barrier(MPI_COMM_WORLD);  // every stage is on disk before `latest` names the step
      if (rank == 0) write_latest(c.output_dir, step);
    };

    int first_step = 1;
    if (c.resume) {
      const int latest = read_latest(c.output_dir);
      if (latest > 0) {
        for (const auto& [s, optimizer] : stage_optimizers)
          load_stage(c.output_dir, latest, s, executor.stage_parameters(s), optimizer);
        first_step = latest + 1;
        say("resumed from the checkpoint of step " + std::to_string(latest));
      } else {
        say("no checkpoint in " + c.output_dir + "; starting from step 1");
      }
    }
    std::ofstream metrics;
    if (rank == 0)
      metrics.open(fs::path(c.output_dir) / "metrics.jsonl",
                   first_step > 1 ? std::ios::app : std::ios::trunc);
    const int last_traced = std::min(c.steps, first_step + c.trace_steps - 1);
    MemoryMeter meter(torch::kCPU);
    MPI_Barrier(MPI_COMM_WORLD);
    TraceRecorder recorder(rank);
    if (last_traced >= first_step) {
      recorder.record_until_step(last_traced);
      executor.trace_into(&recorder);
      meter.reset_peak();
    }
    const auto started = Clock::now();
    double last_val = -1;
    for (int step = first_step; step <= c.steps; ++step) {
      recorder.begin_step(step);
      for (auto& optimizer : optimizers) optimizer->zero_grad();
      const StepLoss local = executor.run(program, [&](int i) {
        return data->micro_batch(step, i, false);
      });
      for (auto& optimizer : optimizers) optimizer->step();
      const double loss = all_reduce_sum(local.sum) / std::max(1.0, all_reduce_sum(local.count));
      const bool eval = c.eval_every > 0 && (step % c.eval_every == 0 || step == c.steps);
      if (eval) {
        const StepLoss v = executor.evaluate(eval_program, [&](int i) {
          return data->micro_batch(0, i, true);  // the same validation set every time
        });
        last_val = all_reduce_sum(v.sum) / std::max(1.0, all_reduce_sum(v.count));
      }
      if (rank == 0) {
        const double elapsed = seconds_since(started);
        const double samples_per_s = static_cast<double>(step - first_step + 1) *
                                     c.micro_batches * c.micro_batch_size / elapsed;
        nlohmann::ordered_json line;
        line["step"] = step;
        line["loss"] = loss;
        if (eval) line["val_loss"] = last_val;
        line["samples_per_s"] = samples_per_s;
        line["seconds"] = elapsed;
        metrics << line.dump() << '\n';
        metrics.flush();
        if (eval || step == 1 || step % std::max(1, c.steps / 20) == 0) {
          char buf[256];
          std::snprintf(buf, sizeof buf, "step %d/%d  loss %.4f%s  %.1f samples/s  eta %s", step,
                        c.steps, loss,
                        eval ? ("  val " + std::to_string(last_val).substr(0, 6)).c_str() : "",
                        samples_per_s,
                        duration_text(elapsed / (step - first_step + 1) * (c.steps - step)).c_str());
          say(buf);
        }
      }
      if (step == last_traced) {
        recorder.stop();
        write_trace(c, plan, recorder, meter, last_traced - first_step + 1, rank, say);
      }
      if ((c.checkpoint_every > 0 && step % c.checkpoint_every == 0) || step == c.steps)
        checkpoint(step);
    }
    say("done in " + duration_text(seconds_since(started)) + "; plan, profile, metrics and " +
        "checkpoints in " + c.output_dir);
    return 0;
  } catch (const std::exception& e) {
    session.abort(e.what(), 2);
  }
}
