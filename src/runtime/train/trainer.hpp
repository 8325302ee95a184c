#pragma once

#include "runtime/config/train_config.hpp"

namespace madpipe::runtime {

// Runs training under MPI (one process per pipeline rank; call inside an MPI job). Returns the
// process exit code. Rank 0 prints progress and writes <output_dir>/metrics.jsonl and plan.json.
int train(const TrainConfig& config, int* argc, char*** argv);

}  // namespace madpipe::runtime
