#include "runtime/train/training_run.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/units.hpp"
#include "plan/program_memory.hpp"
#include "plan/simulate.hpp"
#include "plan/trace.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/train/stop_request.hpp"
#include "runtime/train/torch_file.hpp"
#include "runtime/train/two_weight_versions.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace madpipe::runtime {
namespace {
// The plan as this run holds it: its weight copies those of the run's optimizer and mode (a plan
// read with --plan may count fewer).
plan::Plan as_held(const TrainConfig& c, const plan::Plan& plan) {
  plan::Plan held = plan;
  held.platform.weight_copies = held_weight_copies(c);
  return held;
}

}  // namespace
}  // namespace madpipe::runtime

madpipe::runtime::TrainingRun::TrainingRun(const TrainConfig& c, int rank, bool reports, Say say)
    : c_(c), rank_(rank), reports_(reports), say_(std::move(say)) {}

int madpipe::runtime::TrainingRun::start(const ResumePoint& resume, const CheckpointFiles& load) {
  first_step_ = 1;
  if (resume.step > 0) {
    load(resume.step);
    first_step_ = resume.step + 1;
    // By the rank that appends to it: the truncation replaces the file, which another rank could
    // already have opened.
    if (reports_)
      truncate_metrics((fs::path(c_.output_dir) / "metrics.jsonl").string(), resume.step);
    say("resumed from the checkpoint of step " + std::to_string(resume.step));
  } else if (c_.resume) {
    say("no checkpoint in " + c_.output_dir + "; starting from step 1");
  }
  install_stop_handlers();
  if (reports_)
    metrics_.open(fs::path(c_.output_dir) / "metrics.jsonl",
                  first_step_ > 1 ? std::ios::app : std::ios::trunc);
  return first_step_;
}

double madpipe::runtime::TrainingRun::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

double madpipe::runtime::TrainingRun::samples_per_s(int step, int samples_per_step) const {
  return static_cast<double>(step - first_step_ + 1) * samples_per_step / seconds();
}

double madpipe::runtime::TrainingRun::lap() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - lap_).count();
  lap_ = now;
  return seconds;
}

std::string madpipe::runtime::TrainingRun::eta(int step) const {
  return duration_text(seconds() / (step - first_step_ + 1) * (c_.steps - step));
}

bool madpipe::runtime::TrainingRun::validates_after(int step) const {
  return c_.eval_every > 0 && (step % c_.eval_every == 0 || step == c_.steps);
}

bool madpipe::runtime::TrainingRun::checkpoints_after(int step) const {
  return (c_.checkpoint_every > 0 && step % c_.checkpoint_every == 0) || step == c_.steps;
}

bool madpipe::runtime::TrainingRun::prints_progress(int step) const {
  return step == 1 || step % std::max(1, c_.steps / 20) == 0;
}

void madpipe::runtime::TrainingRun::append_metrics(const nlohmann::ordered_json& line) {
  if (!reports_) return;
  metrics_ << line.dump() << '\n';
  metrics_.flush();
}

void madpipe::runtime::TrainingRun::checkpoint(int step, const plan::Plan& plan,
                                               const CheckpointFiles& save,
                                               const nlohmann::json& trainer_state) const {
  // A step written again (a run resumed before it) is not complete until every rank saved anew.
  if (rank_ == 0) std::remove((checkpoint_dir(c_.output_dir, step) / "complete").c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  save(step);
  if (rank_ == 0) {
    plan::write_plan(plan, checkpoint_plan_path(c_.output_dir, step).string());
    write_file_atomically((checkpoint_dir(c_.output_dir, step) / "run.json").string(),
                          run_record(c_, step, trainer_state));
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every file is on disk before the checkpoint is complete
  if (rank_ != 0) return;
  const int previous = read_latest(c_.output_dir);
  mark_complete(c_.output_dir, step);
  std::vector<int> deleted;
  try {
    deleted = prune_checkpoints(c_.output_dir, step, c_.keep_checkpoints, previous);
  } catch (const Error& e) {  // rank 0 alone: the run goes on, the old checkpoint stays
    say(std::string("warning: ") + e.what());
  }
  if (!deleted.empty())
    say("deleted the checkpoint" + std::string(deleted.size() > 1 ? "s" : "") + " of step " +
        join_steps(deleted) + " (--keep-checkpoints " + std::to_string(c_.keep_checkpoints) + ")");
}

bool madpipe::runtime::TrainingRun::stops_after(int signal, int step) const {
  if (signal == 0 || step >= c_.steps) return false;
  say(std::string("stopped by ") + signal_name(signal) + " after step " + std::to_string(step) +
      "; checkpoint written, continue with --resume");
  return true;
}

void madpipe::runtime::TrainingRun::say_done(const std::string& what) const {
  say("done in " + duration_text(seconds()) + "; " + what);
}

double madpipe::runtime::mean_over_ranks(const StepLoss& loss, double timeout_s) {
  const std::vector<double> all =
      all_reduce_sum({loss.sum, static_cast<double>(loss.count)}, timeout_s);
  return all[0] / std::max(1.0, all[1]);
}

std::string madpipe::runtime::duration_text(double seconds) {
  const long total = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", total / 3600, (total / 60) % 60, total % 60);
  return buf;
}

std::int64_t madpipe::runtime::micro_batch_bytes(const DataSource& data) {
  const Batch batch = data.micro_batch(0, 0, false);
  return static_cast<std::int64_t>(batch.input.nbytes() +
                                   (batch.target.defined() ? batch.target.nbytes() : 0));
}

std::int64_t madpipe::runtime::tokens_per_sample(const DataSource& data) {
  const Batch batch = data.micro_batch(0, 0, false);
  if (batch.input.is_floating_point() || batch.input.dim() < 2) return 0;
  return batch.input.numel() / batch.input.size(0);
}

void madpipe::runtime::note_program_memory(const TrainConfig& c, const plan::Plan& plan,
                                           const plan::Program& program, std::int64_t data_bytes,
                                           const TrainingRun::Say& say) {
  const int held = held_weight_copies(c);
  if (plan.platform.weight_copies < held)
    say("note: the plan counts " + std::to_string(plan.platform.weight_copies) +
        " weight-sized copies per weight, this run holds " + std::to_string(held) + " (" +
        weight_bytes_text(c) +
        (c.mode == TrainingMode::TwoWeightVersions ? ", and 2bw's three more copies" : "") +
        "); plan with " +
        (c.mode == TrainingMode::TwoWeightVersions
             ? "--weight-copies " + std::to_string(held)
             : std::string("--precision ") + name_of(kPrecisionNames, c.precision) +
                   " --optimizer " + name_of(kOptimizerNames, c.optimizer)) +
        " to count them");
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

void madpipe::runtime::TrainingRun::write_trace(
    const plan::Plan& plan, const plan::Program& program, std::int64_t data_bytes,
    const TraceRecorder& recorder, const MemoryMeter& meter, const PipelineExecutor& executor,
    int steps, MPI_Comm pipeline) const {
  const TrainConfig& c = c_;
  const int rank = rank_;
  const torch::Device& device = executor.device();
  const Say& say = say_;
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
  // The steady state's spacing, which the trace measures within a step; the step's tied-weight
  // exchange (in predicted.period_ms) is in the predicted step instead.
  trace.predicted_period_ms = plan.pattern.normalized_period_ms();
  if (c.mode == madpipe::runtime::TrainingMode::Sync) {
    // A step as the runtime runs it: each op as soon as its inputs are there, in plan order.
    plan::SimOptions options;
    options.micro_batches = c.micro_batches;
    options.policy = plan::StartPolicy::Asap;
    trace.predicted_step_ms =
        plan::simulate(plan, options).step_ms + plan.predicted.tied_exchange_ms;
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

void madpipe::runtime::write_validation_set(const TrainConfig& c, const DataSource& data) {
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
