#include "runtime/train/checkpoint.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "runtime/train/checkpoint_files.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;

namespace {
fs::path stage_file(const std::string& dir, int step, int stage) {
  return madpipe::runtime::checkpoint_dir(dir, step) / ("stage-" + std::to_string(stage) + ".pt");
}
}  // namespace

fs::path madpipe::runtime::checkpoint_dir(const std::string& dir, int step) {
  return fs::path(dir) / "checkpoints" / ("step-" + std::to_string(step));
}

fs::path madpipe::runtime::checkpoint_plan_path(const std::string& dir, int step) {
  return checkpoint_dir(dir, step) / "plan.json";
}

void madpipe::runtime::save_stage(const std::string& dir, int step, int stage,
                                  const StageState& state) {
  fs::create_directories(checkpoint_dir(dir, step));
  torch::serialize::OutputArchive archive;
  archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
  for (const auto& [kind, tensors] :
       {std::pair{"parameter", &state.parameters}, std::pair{"buffer", &state.buffers}}) {
    archive.write(std::string(kind) + "s",
                  torch::tensor(static_cast<std::int64_t>(tensors->size())));
    for (std::size_t i = 0; i < tensors->size(); ++i)
      archive.write(kind + std::to_string(i), (*tensors)[i].detach().cpu());
  }
  for (const auto& [field, keys] : {std::pair{"parameter_keys", &state.parameter_keys},
                                    std::pair{"buffer_keys", &state.buffer_keys}})
    if (!keys->empty()) archive.write(field, c10::IValue(c10::List<std::string>(*keys)));
  if (state.optimizer) {
    torch::serialize::OutputArchive optimizer;
    state.optimizer->save(optimizer);
    archive.write("optimizer", optimizer);
  }
  save_archive(archive, stage_file(dir, step, stage), checkpoint_fault_requested(step));
}

std::string madpipe::runtime::verify_stage(const std::string& dir, int step, int stage) {
  return verify_file(stage_file(dir, step, stage));
}

void madpipe::runtime::load_stage(const std::string& dir, int step, int stage,
                                  const StageState& state, const torch::Device& device) {
  const fs::path file = stage_file(dir, step, stage);
  torch::serialize::InputArchive archive;
  load_archive(archive, file, device);
  torch::NoGradGuard no_grad;
  for (const auto& [kind, tensors] :
       {std::pair{"parameter", &state.parameters}, std::pair{"buffer", &state.buffers}}) {
    const std::string field = std::string(kind) + "s";
    torch::Tensor count;
    if (!archive.try_read(field, count))
      throw Error(ErrorKind::InvalidInput, file.string(), field,
                  "missing (a checkpoint of an older madpipe, without the stage's " + field + "?)");
    if (count.item<std::int64_t>() != static_cast<std::int64_t>(tensors->size()))
      throw Error(ErrorKind::InvalidInput, file.string(), field,
                  "the checkpoint holds " + std::to_string(count.item<std::int64_t>()) + " " +
                      field + " but the stage has " + std::to_string(tensors->size()));
    for (std::size_t i = 0; i < tensors->size(); ++i) {
      torch::Tensor value;
      archive.read(kind + std::to_string(i), value);
      if (!value.sizes().equals((*tensors)[i].sizes()))
        throw Error(ErrorKind::InvalidInput, file.string(), kind + std::to_string(i),
                    "shape differs from the model's");
      (*tensors)[i].copy_(value);
    }
  }
  if (state.optimizer) {
    torch::serialize::InputArchive optimizer;
    archive.read("optimizer", optimizer);
    state.optimizer->load(optimizer);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> madpipe::runtime::read_stage_tensors(
    const std::string& dir, int step, int stage) {
  const fs::path file = stage_file(dir, step, stage);
  torch::serialize::InputArchive archive;
  load_archive(archive, file, torch::kCPU);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [kind, field] :
       {std::pair{"parameter", "parameter_keys"}, std::pair{"buffer", "buffer_keys"}}) {
    torch::Tensor count;
    c10::IValue keys;
    archive.read(std::string(kind) + "s", count);
    if (count.item<std::int64_t>() == 0) continue;
    if (!archive.try_read(field, keys) || !keys.isList())
      throw Error(
          ErrorKind::InvalidInput, file.string(), field,
          "missing: the checkpoint does not name its tensors (written by an older madpipe)");
    const c10::List<c10::IValue> list = keys.toList();
    if (static_cast<std::int64_t>(list.size()) != count.item<std::int64_t>())
      throw Error(ErrorKind::InvalidInput, file.string(), field,
                  "names " + std::to_string(list.size()) + " tensors but the stage holds " +
                      std::to_string(count.item<std::int64_t>()));
    for (std::size_t i = 0; i < list.size(); ++i) {
      torch::Tensor value;
      archive.read(kind + std::to_string(i), value);
      out.emplace_back(list.get(i).toStringRef(), value);
    }
  }
  return out;
}

void madpipe::runtime::mark_complete(const std::string& dir, int step) {
  write_file_atomically((checkpoint_dir(dir, step) / "complete").string(),
                        std::to_string(step) + "\n");
  write_file_atomically((fs::path(dir) / "checkpoints" / "latest").string(),
                        std::to_string(step) + "\n");
}

std::vector<int> madpipe::runtime::complete_checkpoints(const std::string& dir) {
  std::vector<int> steps;
  const fs::path root = fs::path(dir) / "checkpoints";
  std::error_code ignored;
  if (fs::is_directory(root, ignored)) {
    static const std::regex kStepDir("step-([0-9]+)");
    for (const auto& entry : fs::directory_iterator(root, ignored)) {
      std::smatch match;
      const std::string name = entry.path().filename().string();
      if (std::regex_match(name, match, kStepDir) && fs::exists(entry.path() / "complete"))
        steps.push_back(std::stoi(match[1]));
    }
  }
  const int latest = read_latest(dir);
  if (latest > 0 && std::find(steps.begin(), steps.end(), latest) == steps.end())
    steps.push_back(latest);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::vector<int> madpipe::runtime::prune_checkpoints(const std::string& dir, int step, int keep,
                                                     int previous) {
  std::vector<int> deleted;
  const fs::path root = fs::path(dir) / "checkpoints";
  static const std::regex kStepDir("step-([0-9]+)");
  std::vector<std::pair<int, bool>> steps;  // step, complete
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator(root, ignored)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, kStepDir) || std::stoi(match[1]) > step) continue;
    const int s = std::stoi(match[1]);
    steps.emplace_back(s, s == previous || fs::exists(entry.path() / "complete"));
  }
  std::sort(steps.rbegin(), steps.rend());
  int complete = 0;
  for (const auto& [s, whole] : steps) {
    const bool failed = !whole && s > previous;  // an incomplete one older than `previous`: left
    const bool kept =
        s == step || (whole && (keep == 0 || ++complete <= keep)) || (!whole && !failed);
    if (whole && s == step) ++complete;
    if (kept) continue;
    remove_tree(checkpoint_dir(dir, s));  // throws naming the directory
    if (whole) deleted.push_back(s);
  }
  std::sort(deleted.begin(), deleted.end());
  return deleted;
}

std::string madpipe::runtime::join_steps(const std::vector<int>& steps) {
  std::string out;
  for (int s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

int madpipe::runtime::read_latest(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "checkpoints" / "latest");
  int step = 0;
  if (!(in >> step)) return 0;
  return step;
}
