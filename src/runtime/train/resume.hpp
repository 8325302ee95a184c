#pragma once

#include "runtime/train/trainer.hpp"

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace madpipe::runtime {

struct ResumePoint {
  int step = 0;           // 0: start from step 1
  std::string plan_path;  // the plan the checkpoint's stages belong to
  nlohmann::json state;   // run.json's "state": the trainer's own (fp16's loss scaler), or null
};

// Collective. The newest complete checkpoint in <output_dir>/checkpoints whose stage files are
// all whole: each rank verifies the files of its own stages, by the plan saved with the
// checkpoint. A damaged checkpoint is reported (which file, what is wrong) and the one before it
// is tried. Throws Error{Io} when checkpoints exist but none is whole.
ResumePoint find_resume_point(const std::string& output_dir, int rank,
                              const std::function<void(const std::string&)>& say);

// Drops the lines of a metrics.jsonl file after `step`, atomically: a run resumed from an older
// checkpoint writes them again.
void truncate_metrics(const std::string& path, int step);

// run.json of a checkpoint: the run's settings and where the data continues (micro-batches are a
// function of seed, step and index, so the next step is the data loader's whole state).
// `state`: what the trainer keeps besides stages (fp16's loss scaler), under "state".
std::string run_record(const TrainConfig& config, int step,
                       const nlohmann::json& state = nlohmann::json());

// Throws Error{InvalidInput} naming the checkpoint's run.json and the first setting of the model,
// the data and the training that differs between it and `config` (--steps, --learning-rate,
// --min-lr and --loss-scale may change, and the micro-batches per replica with the replicas when
// their product, the micro-batches of a step, stays; settings the file does not record are not
// compared). Returns the platform settings that changed ("gpus 2 -> 3"): where the run trains.
// A missing run.json is no error (checkpoints of older versions).
std::vector<std::string> check_resumed_settings(const std::string& output_dir, int step,
                                                const TrainConfig& config);

// Throws Error{InvalidInput} naming both files when the plan given with --resume splits the layers
// into other stages or places them on other GPUs than the checkpoint's plan.
void check_resumed_plan(const std::string& given_path, const std::string& checkpoint_plan_path);

}  // namespace madpipe::runtime
