#include "runtime/train/export_weights.hpp"

#include "core/error.hpp"
#include "plan/plan.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/layer_checkpoint.hpp"
#include "runtime/train/torch_file.hpp"

#include <filesystem>

#include <torch/torch.h>

madpipe::runtime::ExportedWeights madpipe::runtime::export_weights(const std::string& run_dir,
                                                                   const std::string& output,
                                                                   int step) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(run_dir))
    throw Error(ErrorKind::Io, run_dir, "", "no such folder (the --output-dir of madpipe train)");
  ExportedWeights out;
  out.step = step > 0 ? step : read_latest(run_dir);
  if (out.step <= 0)
    throw Error(ErrorKind::Io, (fs::path(run_dir) / "checkpoints").string(), "",
                "no complete checkpoint (madpipe train writes one at its end and every "
                "--checkpoint-every steps)");
  const fs::path plan_path = checkpoint_plan_path(run_dir, out.step);
  if (!fs::exists(plan_path))
    throw Error(ErrorKind::Io, plan_path.string(), "",
                "missing: no checkpoint of step " + std::to_string(out.step));
  const plan::Plan plan = plan::read_plan(plan_path.string());
  c10::Dict<std::string, at::Tensor> state;
  // A checkpoint keyed by the model holds a file per layer; an older one, a file per stage.
  const bool by_layer = holds_layer_files(run_dir, out.step);
  const int files =
      by_layer ? plan.stages.back().last_layer + 1 : static_cast<int>(plan.stages.size());
  for (int f = 0; f < files; ++f) {
    for (auto& [key, tensor] : by_layer ? read_layer_tensors(run_dir, out.step, f)
                                        : read_stage_tensors(run_dir, out.step, f)) {
      if (state.contains(key))
        throw Error(ErrorKind::InvalidInput, checkpoint_dir(run_dir, out.step).string(), key,
                    "two files of the checkpoint hold this tensor");
      out.bytes += static_cast<std::int64_t>(tensor.nbytes());
      state.insert(key, tensor);
      ++out.tensors;
    }
  }
  write_torch_file(output, c10::IValue(state));
  return out;
}
