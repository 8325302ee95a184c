#include "runtime/train/torch_file.hpp"

#include "core/json_file.hpp"

#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

std::string madpipe::runtime::torch_file_bytes(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* data, std::size_t size) { pickled.insert(pickled.end(), data, data + size); },
      nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t size) {
    out.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return out;
}

void madpipe::runtime::write_torch_file(const std::string& path, const c10::IValue& value) {
  write_file_atomically(path, torch_file_bytes(value));
}
