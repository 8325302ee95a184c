#include "runtime/train/safetensors_file.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"

#include <cstdint>

#include <nlohmann/json.hpp>

namespace {
std::string dtype_name(const std::string& key, c10::ScalarType type) {
  switch (type) {
    case torch::kFloat64:
      return "F64";
    case torch::kFloat32:
      return "F32";
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kInt64:
      return "I64";
    case torch::kInt32:
      return "I32";
    case torch::kInt16:
      return "I16";
    case torch::kInt8:
      return "I8";
    case torch::kUInt8:
      return "U8";
    case torch::kBool:
      return "BOOL";
    default:
      throw madpipe::Error(
          madpipe::ErrorKind::InvalidInput, "", key,
          std::string("safetensors has no name for the dtype ") + c10::toString(type));
  }
}
}  // namespace

void madpipe::runtime::write_safetensors(
    const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  std::int64_t offset = 0;
  for (const auto& [key, tensor] : tensors) {
    const torch::Tensor bytes = tensor.detach().to(torch::kCPU).contiguous();
    const auto size = static_cast<std::int64_t>(bytes.nbytes());
    header[key] = {{"dtype", dtype_name(key, bytes.scalar_type())},
                   {"shape", bytes.sizes().vec()},
                   {"data_offsets", {offset, offset + size}}};
    offset += size;
    data.push_back(bytes);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)  // the header's length, little-endian
    file[static_cast<std::size_t>(i)] =
        static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  file += text;
  file.reserve(file.size() + static_cast<std::size_t>(offset));
  for (const torch::Tensor& bytes : data)  // x86-64 and aarch64 hosts are little-endian
    file.append(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes());
  write_file_atomically(path, file);
}
