#include "runtime/train/checkpoint.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"

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

fs::path sum_file(const fs::path& file) { return file.string() + ".sum"; }

// FNV-1a 64 of a file's bytes, as 16 hex digits; empty when the file cannot be read.
std::string checksum_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  std::uint64_t hash = 1469598103934665603ULL;
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof buffer);
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      hash ^= static_cast<unsigned char>(buffer[i]);
      hash *= 1099511628211ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string read_first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
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
  const fs::path target = stage_file(dir, step, stage);
  const fs::path tmp = target.string() + ".tmp";
  try {
    archive.save_to(tmp.string());
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, tmp.string(), "",
                std::string("cannot write checkpoint: ") + e.what_without_backtrace());
  }
  const std::string sum = checksum_of(tmp);
  if (sum.empty())
    throw Error(ErrorKind::Io, tmp.string(), "", "cannot read back the checkpoint just written");
  fs::rename(tmp, target);
  write_file_atomically(sum_file(target).string(), sum + "\n");
}

std::string madpipe::runtime::verify_stage(const std::string& dir, int step, int stage) {
  const fs::path file = stage_file(dir, step, stage);
  if (!fs::exists(file)) return file.string() + ": missing";
  const std::string expected = read_first_line(sum_file(file));
  if (expected.empty()) return sum_file(file).string() + ": missing or empty checksum";
  const std::string actual = checksum_of(file);
  if (actual != expected)
    return file.string() + ": checksum " + actual + " differs from the recorded " + expected +
           " (the file is damaged or partial)";
  return "";
}

void madpipe::runtime::load_stage(const std::string& dir, int step, int stage,
                                  const StageState& state, const torch::Device& device) {
  const fs::path file = stage_file(dir, step, stage);
  const std::string problem = verify_stage(dir, step, stage);
  if (!problem.empty()) throw Error(ErrorKind::Io, file.string(), "", problem);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file.string(), device);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, file.string(), "",
                std::string("cannot read checkpoint: ") + e.what_without_backtrace());
  }
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
  const std::string problem = verify_stage(dir, step, stage);
  if (!problem.empty()) throw Error(ErrorKind::Io, file.string(), "", problem);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file.string(), torch::kCPU);
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, file.string(), "",
                std::string("cannot read checkpoint: ") + e.what_without_backtrace());
  }
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

int madpipe::runtime::read_latest(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "checkpoints" / "latest");
  int step = 0;
  if (!(in >> step)) return 0;
  return step;
}
