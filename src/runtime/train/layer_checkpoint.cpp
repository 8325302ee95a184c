#include "runtime/train/layer_checkpoint.hpp"

#include "core/error.hpp"
#include "runtime/train/checkpoint.hpp"
#include "runtime/train/checkpoint_files.hpp"
#include "runtime/train/optimizer.hpp"

#include <cstdint>

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "madpipe.layer/1";

std::vector<std::string> read_keys(torch::serialize::InputArchive& archive, const char* field,
                                   const fs::path& file) {
  c10::IValue value;
  if (!archive.try_read(field, value) || !value.isList())
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file.string(), field,
                         "missing: not a layer of a madpipe checkpoint");
  std::vector<std::string> keys;
  for (const c10::IValue& key : value.toList()) keys.push_back(key.toStringRef());
  return keys;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) text += (text.empty() ? "" : ", ") + key;
  return text.empty() ? "none" : text;
}

torch::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& name,
                          const fs::path& file) {
  torch::Tensor value;
  if (!archive.try_read(name, value))
    throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file.string(), name, "missing");
  return value;
}
}  // namespace

fs::path madpipe::runtime::layer_file(const std::string& dir, int step, int layer) {
  return checkpoint_dir(dir, step) / "layers" / ("layer-" + std::to_string(layer) + ".pt");
}

bool madpipe::runtime::holds_layer_files(const std::string& dir, int step) {
  return fs::is_directory(checkpoint_dir(dir, step) / "layers");
}

void madpipe::runtime::save_layer(const std::string& dir, int step, const LayerState& state) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string(kFormat)));
  archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
  archive.write("layer", torch::tensor(static_cast<std::int64_t>(state.layer)));
  archive.write("parameter_keys", c10::IValue(c10::List<std::string>(state.parameter_keys)));
  archive.write("buffer_keys", c10::IValue(c10::List<std::string>(state.buffer_keys)));
  for (std::size_t i = 0; i < state.parameters.size(); ++i) {
    const torch::Tensor& parameter = state.parameters[i];
    archive.write("parameter" + std::to_string(i), parameter.detach().cpu());
    std::vector<torch::Tensor> optimizer_state;
    if (state.optimizers[i]) optimizer_state = export_param_state(*state.optimizers[i], parameter);
    archive.write("state" + std::to_string(i),
                  torch::tensor(static_cast<std::int64_t>(optimizer_state.size())));
    for (std::size_t j = 0; j < optimizer_state.size(); ++j)
      archive.write("state" + std::to_string(i) + "." + std::to_string(j),
                    optimizer_state[j].cpu());
  }
  for (std::size_t i = 0; i < state.buffers.size(); ++i)
    archive.write("buffer" + std::to_string(i), state.buffers[i].detach().cpu());
  save_archive(archive, layer_file(dir, step, state.layer), checkpoint_fault_requested(step));
}

std::string madpipe::runtime::verify_layer(const std::string& dir, int step, int layer) {
  return verify_file(layer_file(dir, step, layer));
}

void madpipe::runtime::load_layer(const std::string& dir, int step, const LayerState& state,
                                  const torch::Device& device) {
  const fs::path file = layer_file(dir, step, state.layer);
  torch::serialize::InputArchive archive;
  load_archive(archive, file, device);
  for (const auto& [field, wanted] : {std::pair{"parameter_keys", &state.parameter_keys},
                                      std::pair{"buffer_keys", &state.buffer_keys}}) {
    const std::vector<std::string> saved = read_keys(archive, field, file);
    if (saved != *wanted)
      throw Error(ErrorKind::InvalidInput, file.string(), field,
                  "the checkpoint's layer " + std::to_string(state.layer) + " holds " +
                      joined(saved) + " but the model's has " + joined(*wanted) +
                      " (another model?)");
  }
  torch::NoGradGuard no_grad;
  auto copy_into = [&](const std::string& name, const torch::Tensor& target) {
    const torch::Tensor value = read_tensor(archive, name, file);
    if (!value.sizes().equals(target.sizes()))
      throw Error(ErrorKind::InvalidInput, file.string(), name,
                  "shape [" + c10::str(value.sizes()) + "] differs from the model's [" +
                      c10::str(target.sizes()) + "]");
    target.copy_(value);
  };
  for (std::size_t i = 0; i < state.parameters.size(); ++i) {
    copy_into("parameter" + std::to_string(i), state.parameters[i]);
    const std::string prefix = "state" + std::to_string(i);
    const std::int64_t count = read_tensor(archive, prefix, file).item<std::int64_t>();
    std::vector<torch::Tensor> optimizer_state;
    for (std::int64_t j = 0; j < count; ++j)
      optimizer_state.push_back(read_tensor(archive, prefix + "." + std::to_string(j), file));
    if (state.optimizers[i] && !optimizer_state.empty())
      import_param_state(*state.optimizers[i], state.parameters[i], optimizer_state);
  }
  for (std::size_t i = 0; i < state.buffers.size(); ++i)
    copy_into("buffer" + std::to_string(i), state.buffers[i]);
}

std::vector<std::pair<std::string, torch::Tensor>> madpipe::runtime::read_layer_tensors(
    const std::string& dir, int step, int layer) {
  const fs::path file = layer_file(dir, step, layer);
  torch::serialize::InputArchive archive;
  load_archive(archive, file, torch::kCPU);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [field, kind] :
       {std::pair{"parameter_keys", "parameter"}, std::pair{"buffer_keys", "buffer"}}) {
    const std::vector<std::string> keys = read_keys(archive, field, file);
    for (std::size_t i = 0; i < keys.size(); ++i)
      out.emplace_back(keys[i], read_tensor(archive, kind + std::to_string(i), file));
  }
  return out;
}
