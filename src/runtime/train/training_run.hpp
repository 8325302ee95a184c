#pragma once

#include "plan/plan.hpp"
#include "plan/program.hpp"
#include "runtime/config/train_config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/memory_meter.hpp"
#include "runtime/device/trace_recorder.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/resume.hpp"

#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>
#include <nlohmann/json.hpp>

namespace madpipe::runtime {

// The lifecycle that the step kinds of a training run (synchronous steps, 2BW windows) share:
// where it resumes, metrics.jsonl, progress lines and their ETA, when it validates and
// checkpoints, the checkpoint itself, the trace, how a stop request ends it and its last line.
class TrainingRun {
 public:
  using Say = std::function<void(const std::string&)>;
  using StageStates = std::vector<std::pair<int, StageState>>;

  // `reports`: this rank appends to metrics.jsonl (rank 0 in synchronous training; in 2BW, the
  // rank of the last stage, which computes the losses).
  TrainingRun(const TrainConfig& c, int rank, bool reports, Say say);

  // What this rank reads from or writes into the checkpoint of a step (its layers, or its stages).
  using CheckpointFiles = std::function<void(int step)>;

  // Loads this rank's part of the checkpoint of `resume` with `load` (or says that there is none
  // to resume from), truncates metrics.jsonl to the resumed step, installs the stop handlers and
  // opens metrics.jsonl. Returns the first step to run.
  int start(const ResumePoint& resume, const CheckpointFiles& load);
  // The clock of the run's rates and ETA starts now.
  void start_clock() { started_ = lap_ = std::chrono::steady_clock::now(); }
  // Seconds since the previous lap (or the start of the clock): one step's time.
  double lap();

  int first_step() const noexcept { return first_step_; }
  const TrainConfig& config() const noexcept { return c_; }
  int rank() const noexcept { return rank_; }
  void say(const std::string& line) const { say_(line); }
  const Say& sayer() const noexcept { return say_; }

  double seconds() const;
  // Samples per second over the steps run so far, `samples_per_step` each.
  double samples_per_s(int step, int samples_per_step) const;
  std::string eta(int step) const;
  bool validates_after(int step) const;
  bool checkpoints_after(int step) const;  // --checkpoint-every, and the last step
  bool prints_progress(int step) const;    // the first step and every twentieth of the run

  // One line of metrics.jsonl (only on the reporting rank).
  void append_metrics(const nlohmann::ordered_json& line);

  // Collective: the checkpoint of `step`. Each rank writes its files with `save`; rank 0 writes
  // the plan and the run's record, marks the checkpoint complete once every rank saved, and
  // deletes the complete checkpoints beyond the newest --keep-checkpoints.
  // `trainer_state`: the trainer's own, kept in run.json (ResumePoint::state when resumed).
  void checkpoint(int step, const plan::Plan& plan, const CheckpointFiles& save,
                  const nlohmann::json& trainer_state = nlohmann::json()) const;
  // A stop request after `step`: says where the run stopped, when steps were left.
  bool stops_after(int signal, int step) const;
  void say_done(const std::string& what) const;

  // Collective on `pipeline`: trace.json of `steps` traced steps of `program` and the summary.
  void write_trace(const plan::Plan& plan, const plan::Program& program, std::int64_t data_bytes,
                   const TraceRecorder& recorder, const MemoryMeter& meter,
                   const PipelineExecutor& executor, int steps, MPI_Comm pipeline) const;

 private:
  const TrainConfig& c_;
  int rank_;
  bool reports_;
  Say say_;
  int first_step_ = 1;
  std::ofstream metrics_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point lap_ = started_;
};

// Collective: the mean loss over every rank's micro-batches (one all-reduce).
double mean_over_ranks(const StepLoss& loss, double timeout_s = 0);
// "12.3 s", "4 min 05 s"...
std::string duration_text(double seconds);
// Bytes of one micro-batch's data (inputs and targets).
std::int64_t micro_batch_bytes(const DataSource& data);
// Tokens of one sample when the data is token ids (an integer input of a sequence per sample),
// else 0.
std::int64_t tokens_per_sample(const DataSource& data);
// The lowered program's bound against --memory, said as a note where it is exceeded, and a note
// when the plan counts fewer weight copies than the run holds.
void note_program_memory(const TrainConfig& c, const plan::Plan& plan, const plan::Program& program,
                         std::int64_t data_bytes, const TrainingRun::Say& say);
// <output-dir>/validation.pt: the samples every validation loss is the mean loss of, as
// torch.save({"inputs": X, "targets": Y}) would write them, to check a loss outside madpipe.
void write_validation_set(const TrainConfig& c, const DataSource& data);

}  // namespace madpipe::runtime
