#include "runtime/checkpoint.hpp"

#include <filesystem>
#include <fstream>

#include "core/error.hpp"

namespace fs = std::filesystem;

static fs::path step_dir(const std::string& dir, int step) {
  return fs::path(dir) / "checkpoints" / ("step-" + std::to_string(step));
}

static fs::path stage_file(const std::string& dir, int step, int stage) {
  return step_dir(dir, step) / ("stage-" + std::to_string(stage) + ".pt");
}

void madpipe::runtime::save_stage(const std::string& dir, int step, int stage,
                                  const std::vector<torch::Tensor>& parameters,
                                  torch::optim::Optimizer* optimizer) {
  fs::create_directories(step_dir(dir, step));
  torch::serialize::OutputArchive archive;
  archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
  archive.write("parameters", torch::tensor(static_cast<std::int64_t>(parameters.size())));
  for (std::size_t i = 0; i < parameters.size(); ++i)
    archive.write("parameter" + std::to_string(i), parameters[i].detach());
  if (optimizer) {
    torch::serialize::OutputArchive state;
    optimizer->save(state);
    archive.write("optimizer", state);
  }
  const fs::path target = stage_file(dir, step, stage);
  const fs::path tmp = target.string() + ".tmp";
  try {
    archive.save_to(tmp.string());
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, tmp.string(), "", std::string("cannot write checkpoint: ") + e.what_without_backtrace());
  }
  fs::rename(tmp, target);
}

void madpipe::runtime::load_stage(const std::string& dir, int step, int stage,
                                  const std::vector<torch::Tensor>& parameters,
                                  torch::optim::Optimizer* optimizer) {
  const fs::path file = stage_file(dir, step, stage);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file.string());
  } catch (const c10::Error& e) {
    throw Error(ErrorKind::Io, file.string(), "", std::string("cannot read checkpoint: ") + e.what_without_backtrace());
  }
  torch::Tensor count;
  archive.read("parameters", count);
  if (count.item<std::int64_t>() != static_cast<std::int64_t>(parameters.size()))
    throw Error(ErrorKind::InvalidInput, file.string(), "parameters",
                "the checkpoint holds " + std::to_string(count.item<std::int64_t>()) +
                    " tensors but the stage has " + std::to_string(parameters.size()));
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    torch::Tensor value;
    archive.read("parameter" + std::to_string(i), value);
    if (!value.sizes().equals(parameters[i].sizes()))
      throw Error(ErrorKind::InvalidInput, file.string(), "parameter" + std::to_string(i),
                  "shape differs from the model's");
    parameters[i].copy_(value);
  }
  if (optimizer) {
    torch::serialize::InputArchive state;
    archive.read("optimizer", state);
    optimizer->load(state);
  }
}

fs::path madpipe::runtime::checkpoint_plan_path(const std::string& dir, int step) {
  return step_dir(dir, step) / "plan.json";
}

void madpipe::runtime::write_latest(const std::string& dir, int step) {
  const fs::path latest = fs::path(dir) / "checkpoints" / "latest";
  const fs::path tmp = latest.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << step << '\n';
    if (!out) throw Error(ErrorKind::Io, tmp.string(), "", "cannot write file");
  }
  fs::rename(tmp, latest);
}

int madpipe::runtime::read_latest(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "checkpoints" / "latest");
  int step = 0;
  if (!(in >> step)) return 0;
  return step;
}
