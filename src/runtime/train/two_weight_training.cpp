#include "runtime/train/two_weight_training.hpp"

#include "core/error.hpp"
#include "core/exit_codes.hpp"
#include "core/units.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/config/learning_rate.hpp"
#include "runtime/device/device.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/train/layer_migration.hpp"
#include "runtime/train/optimizer.hpp"
#include "runtime/train/stop_request.hpp"
#include "runtime/train/sync_pipeline.hpp"
#include "runtime/train/two_weight_versions.hpp"
#include "schedule/memory.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

namespace madpipe::runtime {
namespace {

// The last step of the 2BW window that starts at `first`: windows end where the run validates,
// checkpoints or ends, and hold at most kMaxWindow steps.
int window_end(const TrainConfig& c, int first) {
  constexpr int kMaxWindow = 50;
  for (int step = first;; ++step)
    if (step == c.steps || step - first + 1 == kMaxWindow ||
        (c.eval_every > 0 && step % c.eval_every == 0) ||
        (c.checkpoint_every > 0 && step % c.checkpoint_every == 0))
      return step;
}

// The second weight version: this rank's layers only, built as the first's were.
std::unique_ptr<ChainModel> second_version(const ChainModel& model, const plan::Plan& plan,
                                           int rank, const torch::Device& device) {
  auto second = std::make_unique<ChainModel>();
  second->names = model.names;
  second->loss = model.loss;
  second->build_layer = model.build_layer;
  second->original_parameter_names = model.original_parameter_names;
  second->original_buffer_names = model.original_buffer_names;
  second->layers.resize(model.layers.size());
  const LayerFilter mine = layers_of_rank(plan, rank);
  for (int l = 0; l < second->size(); ++l)
    if (mine(l)) second->materialize(l, device);
  return second;
}

class TwoWeightWindows {
 public:
  TwoWeightWindows(TrainingRun& run, const plan::Plan& plan, ChainModel& model,
                   const LayerOutputs& outputs, PipelineExecutor& executor, const DataSource& data);
  int train(const ResumePoint& resume);

 private:
  TrainingRun::StageStates stage_states() const;
  const plan::Program& program_of(int length);
  void count_loss(int i, double loss);
  // Runs the window of steps first..last; returns the stop signal the ranks agree on (0: none).
  int run_window(int first, int last);
  void validate(int last);
  void report_memory() const;

  TrainingRun& run_;
  const TrainConfig& c_;
  const plan::Plan& plan_;
  const LayerOutputs& outputs_;
  PipelineExecutor& executor_;
  const DataSource& data_;
  const int m_;
  const torch::Device device_;
  std::unique_ptr<ChainModel> second_;
  std::unique_ptr<TwoWeightVersions> versions_;
  std::map<int, plan::Program> programs_;  // by window length
  plan::Program eval_program_;
  std::map<int, std::pair<double, int>> generation_loss_;
  std::vector<nlohmann::ordered_json> window_lines_;
  int first_bad_step_ = INT_MAX;
  int window_first_ = 1;
  bool evaluating_ = false;  // validation losses are not updates
  MemoryMeter meter_;
};

TwoWeightWindows::TwoWeightWindows(TrainingRun& run, const plan::Plan& plan, ChainModel& model,
                                   const LayerOutputs& outputs, PipelineExecutor& executor,
                                   const DataSource& data)
    : run_(run),
      c_(run.config()),
      plan_(plan),
      outputs_(outputs),
      executor_(executor),
      data_(data),
      m_(run.config().micro_batches),
      device_(executor.device()),
      meter_(executor.device()) {
  const std::vector<int> nca =
      schedule::concurrent_activations(plan.pattern, static_cast<int>(plan.stages.size()));
  const int deepest = *std::max_element(nca.begin(), nca.end());
  if (deepest > m_)
    throw Error(ErrorKind::InvalidInput, "", "micro-batches",
                "2bw needs at least as many micro-batches per update as the plan keeps in flight "
                "on a stage (" +
                    std::to_string(deepest) + "), got " + std::to_string(m_) +
                    ": raise --micro-batches to " + std::to_string(deepest) +
                    ", plan with --algorithm 1f1b (no stage keeps more than the plan has "
                    "stages), or give a --plan that keeps fewer");
  second_ = second_version(model, plan, run.rank(), device_);
  if (model.release_source) model.release_source();
  versions_ = std::make_unique<TwoWeightVersions>(
      executor, *second_, m_,
      [this](std::vector<torch::Tensor> p) { return make_optimizer(c_, std::move(p)); });
  versions_->before_each_update([this](torch::optim::Optimizer& optimizer, int generation) {
    set_learning_rate(optimizer, learning_rate_at(c_, window_first_ + generation));
  });
}

// A checkpoint holds the newest version and its optimizer; the executor's buffers.
TrainingRun::StageStates TwoWeightWindows::stage_states() const {
  TrainingRun::StageStates states;
  for (int s : executor_.local_stages()) {
    StageState state = executor_.stage_state(s, versions_->optimizer(s));
    state.parameters = versions_->newest(s);
    states.emplace_back(s, std::move(state));
  }
  return states;
}

const plan::Program& TwoWeightWindows::program_of(int length) {
  auto program = programs_.find(length);
  if (program != programs_.end()) return program->second;
  plan::LowerOptions options = lower_options(c_, plan_, outputs_, length * m_, true);
  options.update_micro_batches = m_;
  program = programs_.emplace(length, lower_checked(plan_, options)).first;
  if (programs_.size() == 1)
    note_program_memory(c_, plan_, program->second, micro_batch_bytes(data_), run_.sayer());
  return program->second;
}

void TwoWeightWindows::count_loss(int i, double loss) {
  if (evaluating_) return;
  if (!std::isfinite(loss)) first_bad_step_ = std::min(first_bad_step_, window_first_ + i / m_);
  auto& entry = generation_loss_[i / m_];
  entry.first += loss;
  if (++entry.second < m_) return;
  const int step = window_first_ + i / m_;
  nlohmann::ordered_json line;
  line["step"] = step;
  line["loss"] = entry.first / m_;
  line["lr"] = learning_rate_at(c_, step);
  const double step_s = run_.lap();  // since the previous step's last micro-batch
  line["step_s"] = step_s;
  line["samples_per_s"] = step_s > 0 ? m_ * c_.micro_batch_size / step_s : 0.0;
  line["seconds"] = run_.seconds();
  window_lines_.push_back(line);
  if (!c_.quiet && (run_.prints_progress(step) || step == c_.steps)) {
    std::printf("step %d/%d  loss %.4f  (2bw, reported by rank %d)\n", step, c_.steps,
                entry.first / m_, run_.rank());
    std::fflush(stdout);
  }
  generation_loss_.erase(i / m_);
}

int TwoWeightWindows::run_window(int first, int last) {
  window_first_ = first;
  const int length = last - first + 1;
  const plan::Program& program = program_of(length);
  const int traced = std::min(c_.trace_steps, c_.steps - run_.first_step() + 1);
  std::unique_ptr<TraceRecorder> recorder;
  if (first == run_.first_step() && traced > 0) {
    recorder = std::make_unique<TraceRecorder>(run_.rank());
    recorder->number_micro_batches_by_update(m_);
    recorder->record_until_step(std::min(traced, length));
    executor_.trace_into(recorder.get());
  }
  const int m = m_;
  const std::uint64_t seed = c_.seed;
  executor_.seed_layers_by(
      [seed, first, m](int i) { return micro_batch_random_key(seed, first + i / m, i % m); });
  executor_.run(program, [&](int i) {
    return on_device(data_.micro_batch(first + i / m, i % m, false), device_);
  });
  if (recorder) {
    MPI_Barrier(MPI_COMM_WORLD);
    run_.write_trace(plan_, program, micro_batch_bytes(data_), *recorder, meter_, executor_,
                     std::min(traced, length), MPI_COMM_WORLD);
    executor_.trace_into(nullptr);
  }
  versions_->synchronize_copies();  // the executor's model now holds the newest weights
  // Every rank learns of a non-finite loss and of a request to stop.
  int local[2] = {first_bad_step_, -stop_signal()}, all[2];
  MPI_Allreduce(local, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all[0] != INT_MAX)
    throw Error(ErrorKind::Runtime, "", "on-nan",
                "step " + std::to_string(all[0]) + ": the loss of a micro-batch (stage " +
                    std::to_string(plan_.stages.size() - 1) + " on rank " +
                    std::to_string(plan_.stages.back().gpu) +
                    ") is not finite; stopping (2bw applies each update within the pipeline, "
                    "so it cannot skip one)");
  return -all[1];
}

void TwoWeightWindows::validate(int last) {
  evaluating_ = true;
  const StepLoss v = executor_.evaluate(
      eval_program_, [&](int i) { return on_device(data_.micro_batch(0, i, true), device_); });
  evaluating_ = false;
  const double val = mean_over_ranks(v, c_.transfer_timeout);
  if (!window_lines_.empty()) window_lines_.back()["val_loss"] = val;
  run_.say("step " + std::to_string(last) + "/" + std::to_string(c_.steps) + "  val " +
           std::to_string(val).substr(0, 6));
}

// What the tensors of each rank held at most over the run (counted on the CPU, the CUDA
// allocator's statistics on a GPU): it does not grow with the number of steps.
void TwoWeightWindows::report_memory() const {
  std::vector<double> peaks(static_cast<std::size_t>(plan_.platform.gpus), 0.0);
  peaks[static_cast<std::size_t>(run_.rank())] = static_cast<double>(meter_.peak_bytes());
  peaks = all_reduce_sum(peaks);
  std::string table = "tensor memory at most over the run, per rank:";
  for (std::size_t r = 0; r < peaks.size(); ++r)
    table += "\n  rank " + std::to_string(r) + ": " + format_bytes(peaks[r]) + " (" +
             std::to_string(static_cast<long long>(peaks[r])) + " bytes)";
  run_.say(table);
}

int TwoWeightWindows::train(const ResumePoint& resume) {
  run_.start(resume, [this](int step) {
    for (const auto& [s, state] : stage_states())
      load_stage(c_.output_dir, step, s, state, device_);
  });
  if (resume.step > 0) versions_->synchronize_copies();
  run_.say("2bw: " + std::to_string(c_.steps) + " updates of " + std::to_string(m_) +
           " micro-batches; two weight versions per stage, no flush within a window of steps "
           "(it ends at validation, checkpoints and every 50 steps)");
  eval_program_ =
      lower_checked(plan_, lower_options(c_, plan_, outputs_, c_.eval_micro_batches, false));
  run_.start_clock();
  executor_.on_loss([this](int i, double loss) { count_loss(i, loss); });
  MPI_Barrier(MPI_COMM_WORLD);
  meter_.reset_peak();  // the run's peak, not the profiler's
  executor_.reset_memory_peak();
  for (int first = run_.first_step(); first <= c_.steps;) {
    const int last = window_end(c_, first);
    const int stop = run_window(first, last);
    if (run_.validates_after(last)) validate(last);
    for (const auto& line : window_lines_) run_.append_metrics(line);
    window_lines_.clear();
    if (run_.checkpoints_after(last) || stop != 0)
      run_.checkpoint(last, plan_, [this](int step) {
        for (const auto& [s, state] : stage_states()) save_stage(c_.output_dir, step, s, state);
      });
    if (run_.stops_after(stop, last)) return kExitStoppedResumable;
    first = last + 1;
  }
  report_memory();
  run_.say_done(std::to_string(versions_->updates()) + " weight updates on rank " +
                std::to_string(run_.rank()) + "; plan, profile, metrics and checkpoints in " +
                c_.output_dir);
  return 0;
}

}  // namespace

int train_two_weight_versions(TrainingRun& run, const plan::Plan& plan, ChainModel& model,
                              const LayerOutputs& outputs, PipelineExecutor& executor,
                              const DataSource& data, const ResumePoint& resume) {
  return TwoWeightWindows(run, plan, model, outputs, executor, data).train(resume);
}

}  // namespace madpipe::runtime
