#pragma once

#include "core/profile.hpp"
#include "runtime/config/train_config.hpp"

#include <string>
#include <vector>

// What `madpipe profile` runs; no LibTorch types, so that the command line does not include them.
namespace madpipe::runtime {

struct ProfileConfig {
  TrainConfig workload;  // a built-in model: its [model] sizes, data, micro-batch size and seed
  // A TorchScript module instead (its top-level children are the layers), with the shape and
  // dtype of one micro-batch of input (the loss after the last layer is workload.loss: mse
  // against zeros by default, or cross-entropy against class 0).
  std::string torchscript;
  std::string input_shape;
  std::string input_dtype = "float32";  // float32 | int64
  std::string device = "cpu";           // cpu | cuda | cuda:N
  bool tf32 = true;                     // as training runs: --tf32
  int warmup = 2;
  int repeats = 10;
  int threads = 1;   // CPU intra-op threads (a training rank uses 1)
  std::string name;  // profile name; default: the model's
};

// How much the timed runs of a layer varied: (max - min) / median, 0 for a layer too fast to
// time (median 0).
struct LayerSpread {
  double forward = 0;
  double backward = 0;
};

struct ProfileMeasurement {
  Profile profile;
  std::vector<LayerSpread> spread;  // per layer
  bool memory_measured = false;     // false: saved bytes and workspaces are 0 (unknown)
};

// Builds the model on the device and measures it (profiler.hpp). Throws Error on bad settings.
ProfileMeasurement run_profile(const ProfileConfig& config);

}  // namespace madpipe::runtime
