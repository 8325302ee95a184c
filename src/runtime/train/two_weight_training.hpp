#pragma once

#include "plan/plan.hpp"
#include "runtime/data/data.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/model/model.hpp"
#include "runtime/train/resume.hpp"
#include "runtime/train/training_run.hpp"

namespace madpipe::runtime {

// Asynchronous training (2BW): the pattern runs without a flush over windows of steps (m
// micro-batches per update, one update per step), each window one program. A window ends with the
// pipeline drained: there the run validates, checks for non-finite losses and stop requests, and
// checkpoints; the next window starts from the newest weights (both versions). A program holds
// one window, and sends are released as they complete, so memory does not grow with the run.
// The rank of the last stage reports the loss of each update. Returns the exit code.
int train_two_weight_versions(TrainingRun& run, const plan::Plan& plan, ChainModel& model,
                              const LayerOutputs& outputs, PipelineExecutor& executor,
                              const DataSource& data, const ResumePoint& resume);

}  // namespace madpipe::runtime
