#pragma once

#include "runtime/config/model_settings.hpp"
#include "runtime/config/output_settings.hpp"
#include "runtime/config/planning_settings.hpp"
#include "runtime/config/training_settings.hpp"

namespace madpipe::runtime {

// Everything `madpipe train` needs; INI keys and flags share the names of the fields (src/cli).
struct TrainConfig : ModelSettings, TrainingSettings, PlanningSettings, OutputSettings {};

// Throws Error{InvalidInput} naming the option of the first setting that no run can use, or
// that conflicts with another (--replicas not dividing --gpus, 2bw with replicas, ...). Needs no
// MPI: the CLI calls it before any rank starts work.
void check_train_config(const TrainConfig& config);

}  // namespace madpipe::runtime
