#include "runtime/profile_run.hpp"

#include "core/error.hpp"
#include "runtime/data.hpp"
#include "runtime/device.hpp"
#include "runtime/profiler.hpp"
#include "runtime/script_model.hpp"

#include <torch/torch.h>

madpipe::runtime::ProfileMeasurement madpipe::runtime::run_profile(const ProfileConfig& c) {
  if (c.threads < 1) throw Error(ErrorKind::InvalidInput, "", "threads", "must be at least 1");
  const torch::Device device = device_of(c.device);
  torch::set_num_threads(c.threads);
  ProfilerOptions options;
  options.device = device;
  options.warmup = c.warmup;
  options.repeats = c.repeats;
  if (!c.torchscript.empty()) {
    ScriptInput input;
    input.shape = parse_shape(c.input_shape, "input-shape");
    input.dtype = c.input_dtype;
    input.loss = c.loss;
    ScriptChain chain = load_script_chain(c.torchscript, input, device);
    std::string name = c.name;
    if (name.empty()) {
      name = c.torchscript.substr(c.torchscript.find_last_of('/') + 1);
      name = name.substr(0, name.find_last_of('.'));
    }
    return profile_model(chain.model, chain.sample, name, options);
  }
  Workload workload = make_workload(c.workload);
  // No layer is held: the profiler builds each for its measurement, one at a time.
  ChainModel model = build_model(workload.model, [](int) { return false; });
  const Batch sample = on_device(workload.data->micro_batch(0, 0, false), device);
  return profile_model(model, sample, c.name.empty() ? c.workload.model : c.name, options);
}
