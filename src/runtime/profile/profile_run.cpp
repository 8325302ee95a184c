#include "runtime/profile/profile_run.hpp"

#include "core/error.hpp"
#include "runtime/data/data.hpp"
#include "runtime/device/device.hpp"
#include "runtime/model/precision.hpp"
#include "runtime/model/script_model.hpp"
#include "runtime/profile/profiler.hpp"

#include <torch/torch.h>

namespace {
// "models/gpt.pt" -> "gpt": a TorchScript model's default profile name.
std::string file_stem(const std::string& path) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  return name.substr(0, name.find_last_of('.'));
}
}  // namespace

madpipe::runtime::ProfileMeasurement madpipe::runtime::run_profile(const ProfileConfig& c) {
  if (c.threads < 1) throw Error(ErrorKind::InvalidInput, "", "threads", "must be at least 1");
  const torch::Device device = device_of(c.device);
  torch::set_num_threads(c.threads);
  if (device.is_cuda()) allow_tf32(c.tf32);
  check_precision_runs(c.workload.precision, device);
  ProfilerOptions options;
  options.device = device;
  options.warmup = c.warmup;
  options.repeats = c.repeats;
  if (!c.torchscript.empty()) {
    if (c.workload.precision != Precision::Fp32)
      throw Error(
          ErrorKind::InvalidInput, "", "precision",
          "--torchscript profiles in fp32; for bf16 or fp16 profile the model as madpipe train "
          "runs it: --model script --script FILE with its --data");
    ScriptInput input;
    input.shape = parse_shape(c.input_shape, "input-shape");
    input.dtype = c.input_dtype;
    input.loss = c.workload.loss.value_or(LossKind::Mse);
    ScriptChain chain = load_script_chain(c.torchscript, input, device);
    return profile_model(chain.model, chain.sample,
                         c.name.empty() ? file_stem(c.torchscript) : c.name, options);
  }
  Workload workload = make_workload(c.workload, c.workload, c.workload.replicas);
  // No layer is held: the profiler builds each for its measurement, one at a time.
  ChainModel model = take_model(workload);
  if (workload.model.kind == ModelKind::Script)
    check_script_chain(model, workload.data->micro_batch(0, 0, false), workload.model.script);
  const Precision precision = c.workload.precision;
  options.layer_dtype = compute_dtype(precision);
  if (precision != Precision::Fp32) compute_loss_in_fp32(model);
  const Batch sample =
      in_precision(on_device(workload.data->micro_batch(0, 0, false), device), precision);
  const std::string name = !c.name.empty() ? c.name
                           : workload.model.kind == ModelKind::Script
                               ? file_stem(workload.model.script)
                               : name_of(kModelKindNames, c.workload.model);
  return profile_model(model, sample, name, options);
}
