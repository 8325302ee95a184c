#include "runtime/train/export_weights.hpp"

#include "core/error.hpp"
#include "plan/plan.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/layer_checkpoint.hpp"
#include "runtime/train/safetensors_file.hpp"
#include "runtime/train/torch_file.hpp"

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include <torch/torch.h>

madpipe::runtime::ExportedWeights madpipe::runtime::export_weights(const std::string& run_dir,
                                                                   const std::string& output,
                                                                   int step, WeightsFormat format) {
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
  std::vector<std::pair<std::string, torch::Tensor>> state;
  std::set<std::string> keys;
  // A checkpoint keyed by the model holds a file per layer; an older one, a file per stage.
  const bool by_layer = holds_layer_files(run_dir, out.step);
  const int files =
      by_layer ? plan.stages.back().last_layer + 1 : static_cast<int>(plan.stages.size());
  for (int f = 0; f < files; ++f) {
    for (auto& [key, tensor] : by_layer ? read_layer_tensors(run_dir, out.step, f)
                                        : read_stage_tensors(run_dir, out.step, f)) {
      if (!keys.insert(key).second)
        throw Error(ErrorKind::InvalidInput, checkpoint_dir(run_dir, out.step).string(), key,
                    "two files of the checkpoint hold this tensor");
      out.bytes += static_cast<std::int64_t>(tensor.nbytes());
      state.emplace_back(key, tensor);
      ++out.tensors;
    }
  }
  if (format == WeightsFormat::Safetensors) {
    write_safetensors(output, state, {{"format", "pt"}, {"step", std::to_string(out.step)}});
    return out;
  }
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [key, tensor] : state) dict.insert(key, tensor);
  write_torch_file(output, c10::IValue(dict));
  return out;
}
