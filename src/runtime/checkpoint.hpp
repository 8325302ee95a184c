#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace madpipe::runtime {

// Checkpoints live in <dir>/checkpoints/step-<k>/stage-<s>.pt, one file per stage (weights,
// optimizer state, step), each written to a temporary file and renamed. <dir>/checkpoints/latest
// names the newest complete checkpoint; it is written (atomically) only after every rank saved.
void save_stage(const std::string& dir, int step, int stage,
                const std::vector<torch::Tensor>& parameters, torch::optim::Optimizer* optimizer);
// Loads a stage's weights and optimizer state; throws Error{Io} naming the file when missing or
// unreadable, Error{InvalidInput} when it does not match the stage.
void load_stage(const std::string& dir, int step, int stage,
                const std::vector<torch::Tensor>& parameters, torch::optim::Optimizer* optimizer);
void write_latest(const std::string& dir, int step);
// <dir>/checkpoints/step-<k>/plan.json: the plan whose stages the checkpoint holds.
std::filesystem::path checkpoint_plan_path(const std::string& dir, int step);
// The step of the newest complete checkpoint, or 0 when there is none.
int read_latest(const std::string& dir);

}  // namespace madpipe::runtime
