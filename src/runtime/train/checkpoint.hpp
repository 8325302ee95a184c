#pragma once

#include "runtime/exec/stage_state.hpp"

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// A checkpoint of step k lives in <dir>/checkpoints/step-<k>/:
//   stage-<s>.pt       one per stage: weights, optimizer state, step (written by its rank)
//   stage-<s>.pt.sum   the FNV-1a 64 checksum of stage-<s>.pt, written after it
//   plan.json          the plan those stages belong to
//   run.json           the run's settings and where the data continues
//   complete           written by rank 0 once every rank saved: the checkpoint is whole
// Every file is written to a temporary name and renamed. <dir>/checkpoints/latest names the newest
// complete checkpoint.

void save_stage(const std::string& dir, int step, int stage, const StageState& state);
// Empty when stage-<s>.pt of step k is whole (present, checksum present and equal); else what is
// wrong, naming the file.
std::string verify_stage(const std::string& dir, int step, int stage);
// Loads a stage's weights, buffers and optimizer state onto `device` (the rank's, whichever
// device saved them) after verifying its checksum; throws Error{Io} naming the file when
// missing, damaged or unreadable, Error{InvalidInput} when it does not match the stage.
void load_stage(const std::string& dir, int step, int stage, const StageState& state,
                const torch::Device& device);

// The tensors of a stage's checkpoint by their state_dict keys, onto the CPU; throws Error{Io}
// naming the file when missing, damaged or unreadable, Error{InvalidInput} when it holds no keys
// (written by a madpipe before they were saved).
std::vector<std::pair<std::string, torch::Tensor>> read_stage_tensors(const std::string& dir,
                                                                      int step, int stage);

// Rank 0, after every rank saved: `complete` in the step's directory, then `latest`.
void mark_complete(const std::string& dir, int step);
// Steps of the complete checkpoints, newest first (a `latest` without markers counts too).
std::vector<int> complete_checkpoints(const std::string& dir);
// Rank 0, after the checkpoint of `step` is complete: deletes the complete checkpoints of steps
// up to `step` beyond the newest `keep` (0: keeps all), and the incomplete ones between
// `previous` (the newest complete one before, which counts as complete even without a marker, as
// in older layouts) and `step`: written by a run that failed while writing them. Returns the
// complete ones deleted; throws Error{Io} naming a directory it could not delete.
std::vector<int> prune_checkpoints(const std::string& dir, int step, int keep, int previous);
// "2, 4, 6".
std::string join_steps(const std::vector<int>& steps);

std::filesystem::path checkpoint_dir(const std::string& dir, int step);
// <dir>/checkpoints/step-<k>/plan.json: the plan whose stages the checkpoint holds.
std::filesystem::path checkpoint_plan_path(const std::string& dir, int step);
// The step of the newest complete checkpoint, or 0 when there is none.
int read_latest(const std::string& dir);

}  // namespace madpipe::runtime
