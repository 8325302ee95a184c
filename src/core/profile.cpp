#include "core/profile.hpp"

#include "core/json_file.hpp"

#include "core/error.hpp"

#include <cassert>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

using nlohmann::json;

// Sizes (and sums of sizes along the chain) stay below 2^62 so that planner arithmetic on them
// (a few sums and small multiples) cannot overflow std::int64_t.
static constexpr std::int64_t kMaxBytes = std::int64_t{1} << 62;
static constexpr double kMaxBytesDouble = 4611686018427387904.0;  // 2^62
static constexpr std::size_t kMaxLayers = 1'000'000;
static constexpr std::size_t kMaxShownChars = 60;

// A JSON value as it appears in a message, shortened when long: -1.5, "abc", [1,2].
static std::string show(const json& value) {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    const double number = value.get<double>();  // dump() would print null
    return std::isnan(number) ? "nan" : (number < 0 ? "-inf" : "inf");
  }
  std::string text = value.dump();
  if (text.size() > kMaxShownChars) text = text.substr(0, kMaxShownChars) + "...";
  return text;
}

namespace {
// The file and JSON pointer under which values are being read, for messages.
struct Reader {
  const std::string& file;

  [[noreturn]] void fail(const std::string& pointer, const std::string& problem) const {
    madpipe::throw_invalid(file, pointer, problem);
  }

  // The member `key` of `object`, or nullptr when absent.
  const json* find(const json& object, const char* key) const {
    const auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  }

  const json& require(const json& object, const std::string& pointer, const char* key) const {
    const json* value = find(object, key);
    if (value == nullptr) fail(pointer + "/" + key, "missing required field");
    return *value;
  }

  std::string string_value(const json& value, const std::string& pointer) const {
    if (!value.is_string())
      fail(pointer, std::string("must be a string, got ") + value.type_name());
    return value.get<std::string>();
  }

  double time_value(const json& value, const std::string& pointer) const {
    if (!value.is_number()) {
      fail(pointer, std::string("must be a finite number >= 0, got ") + value.type_name());
    }
    const double ms = value.get<double>();
    if (!std::isfinite(ms) || ms < 0) {
      fail(pointer, "must be a finite number >= 0, got " + show(value));
    }
    return ms;
  }

  // A size in bytes: a JSON integer, or a float with an integral value, in [0, 2^62).
  std::int64_t size_value(const json& value, const std::string& pointer) const {
    if (value.is_number_unsigned()) {
      const auto bytes = value.get<std::uint64_t>();
      if (bytes >= static_cast<std::uint64_t>(kMaxBytes)) {
        fail(pointer, "must be below 2^62, got " + show(value));
      }
      return static_cast<std::int64_t>(bytes);
    }
    if (value.is_number_integer()) {
      const auto bytes = value.get<std::int64_t>();
      if (bytes < 0) fail(pointer, "must be an integer >= 0, got " + show(value));
      if (bytes >= kMaxBytes) fail(pointer, "must be below 2^62, got " + show(value));
      return bytes;
    }
    if (value.is_number_float()) {
      const double bytes = value.get<double>();
      if (!std::isfinite(bytes) || bytes != std::floor(bytes)) {
        fail(pointer, "must be an integer, got " + show(value));
      }
      if (bytes < 0) fail(pointer, "must be an integer >= 0, got " + show(value));
      if (bytes >= kMaxBytesDouble) fail(pointer, "must be below 2^62, got " + show(value));
      return static_cast<std::int64_t>(bytes);
    }
    fail(pointer, std::string("must be an integer, got ") + value.type_name());
  }

  std::int64_t required_size(const json& object, const std::string& pointer,
                             const char* key) const {
    return size_value(require(object, pointer, key), pointer + "/" + key);
  }

  std::int64_t optional_size(const json& object, const std::string& pointer,
                             const char* key) const {
    const json* value = find(object, key);
    return value == nullptr ? 0 : size_value(*value, pointer + "/" + key);
  }

  std::string optional_string(const json& object, const char* key, std::string fallback) const {
    const json* value = find(object, key);
    return value == nullptr ? std::move(fallback) : string_value(*value, std::string("/") + key);
  }

  int optional_batch(const json& object) const {
    const json* value = find(object, "batch");
    if (value == nullptr) return 0;
    const std::string pointer = "/batch";
    if (!value->is_number()) {
      fail(pointer, std::string("must be a positive integer, got ") + value->type_name());
    }
    const double batch = value->get<double>();
    if (!(batch >= 1 && batch <= INT_MAX && batch == std::floor(batch))) {
      fail(pointer, "must be a positive integer, got " + show(*value));
    }
    return static_cast<int>(batch);
  }

  madpipe::Layer layer(const json& object, const std::string& pointer) const {
    if (!object.is_object()) {
      fail(pointer, std::string("must be an object, got ") + object.type_name());
    }
    madpipe::Layer out;
    out.name = string_value(require(object, pointer, "name"), pointer + "/name");
    out.forward_ms = time_value(require(object, pointer, "forward_ms"), pointer + "/forward_ms");
    out.backward_ms = time_value(require(object, pointer, "backward_ms"), pointer + "/backward_ms");
    out.weight_bytes = required_size(object, pointer, "weight_bytes");
    out.output_bytes = required_size(object, pointer, "output_bytes");
    out.saved_bytes = optional_size(object, pointer, "saved_bytes");
    out.forward_workspace_bytes = optional_size(object, pointer, "forward_workspace_bytes");
    out.backward_workspace_bytes = optional_size(object, pointer, "backward_workspace_bytes");
    return out;
  }
};
}  // namespace

bool madpipe::operator==(const Layer& a, const Layer& b) {
  return a.name == b.name && a.forward_ms == b.forward_ms && a.backward_ms == b.backward_ms &&
         a.weight_bytes == b.weight_bytes && a.output_bytes == b.output_bytes &&
         a.saved_bytes == b.saved_bytes && a.forward_workspace_bytes == b.forward_workspace_bytes &&
         a.backward_workspace_bytes == b.backward_workspace_bytes;
}

bool madpipe::operator==(const Profile& a, const Profile& b) {
  return a.name == b.name && a.device == b.device && a.dtype == b.dtype && a.batch == b.batch &&
         a.input_bytes == b.input_bytes && a.layers == b.layers;
}

static std::string file_stem(const std::string& file) {
  if (file.empty()) return "";
  return std::filesystem::path(file).stem().string();
}

// Sums along the chain must stay below 2^62 too (ChainCosts keeps prefix sums of them).
static void check_sums(const Reader& reader, const madpipe::Profile& profile) {
  std::int64_t weights = 0;
  std::int64_t stored = profile.input_bytes;
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const madpipe::Layer& layer = profile.layers[l];
    const std::string pointer = "/layers/" + std::to_string(l);
    // Each term is below 2^62, so every partial sum below stays below 2^63.
    weights += layer.weight_bytes;
    if (weights >= kMaxBytes) {
      reader.fail(pointer + "/weight_bytes",
                  "total weight_bytes of layers 0.." + std::to_string(l) + " reaches 2^62");
    }
    stored += layer.saved_bytes;
    if (stored >= kMaxBytes) {
      reader.fail(pointer + "/saved_bytes", "total input, output and saved bytes of layers 0.." +
                                                std::to_string(l) + " reaches 2^62");
    }
    stored += layer.output_bytes;
    if (stored >= kMaxBytes) {
      reader.fail(pointer + "/output_bytes", "total input, output and saved bytes of layers 0.." +
                                                 std::to_string(l) + " reaches 2^62");
    }
  }
}

madpipe::Profile madpipe::profile_from_json(const json& j, const std::string& file) {
  const Reader reader{file};
  if (!j.is_object()) {
    reader.fail("", std::string("must be a JSON object, got ") + j.type_name());
  }
  const json& format = reader.require(j, "", "format");
  if (!format.is_string() || format.get_ref<const std::string&>() != kProfileFormat) {
    reader.fail("/format", std::string("must be \"") + kProfileFormat + "\", got " + show(format));
  }

  Profile profile;
  profile.name = reader.optional_string(j, "name", file_stem(file));
  profile.device = reader.optional_string(j, "device", "");
  profile.dtype = reader.optional_string(j, "dtype", "");
  profile.batch = reader.optional_batch(j);
  profile.input_bytes = reader.required_size(j, "", "input_bytes");

  const json& layers = reader.require(j, "", "layers");
  if (!layers.is_array()) {
    reader.fail("/layers", std::string("must be a non-empty array, got ") + layers.type_name());
  }
  if (layers.empty()) reader.fail("/layers", "must be a non-empty array, got []");
  if (layers.size() > kMaxLayers) {
    reader.fail("/layers", "has " + std::to_string(layers.size()) + " layers, at most " +
                               std::to_string(kMaxLayers) + " are supported");
  }
  profile.layers.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    profile.layers.push_back(reader.layer(layers[l], "/layers/" + std::to_string(l)));
  }
  check_sums(reader, profile);
  return profile;
}

madpipe::Profile madpipe::read_profile(const std::string& path) {
  return profile_from_json(read_json_file(path), path);
}

// Builds the JSON in the key order of FORMATS.md.
static nlohmann::ordered_json to_ordered_json(const madpipe::Profile& profile) {
  nlohmann::ordered_json out;
  out["format"] = madpipe::kProfileFormat;
  out["name"] = profile.name;
  out["device"] = profile.device;
  out["dtype"] = profile.dtype;
  if (profile.batch > 0) out["batch"] = profile.batch;  // 0: unknown, left out
  out["input_bytes"] = profile.input_bytes;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const madpipe::Layer& layer : profile.layers) {
    nlohmann::ordered_json entry;
    entry["name"] = layer.name;
    entry["forward_ms"] = layer.forward_ms;
    entry["backward_ms"] = layer.backward_ms;
    entry["weight_bytes"] = layer.weight_bytes;
    entry["output_bytes"] = layer.output_bytes;
    entry["saved_bytes"] = layer.saved_bytes;
    entry["forward_workspace_bytes"] = layer.forward_workspace_bytes;
    entry["backward_workspace_bytes"] = layer.backward_workspace_bytes;
    layers.push_back(std::move(entry));
  }
  out["layers"] = std::move(layers);
  return out;
}

json madpipe::profile_to_json(const Profile& profile) {
  // nlohmann::json keeps keys sorted; the file writer uses the documented order instead.
  return json(to_ordered_json(profile));
}

void madpipe::write_profile(const Profile& profile, const std::string& path) {
  // Refuse to write what read_profile would reject (negative or NaN times, no layers...).
  const nlohmann::ordered_json ordered = to_ordered_json(profile);
  profile_from_json(json(ordered), path);
  const std::string text = ordered.dump(1) + "\n";

  write_file_atomically(path, text);
}

std::int64_t madpipe::input_bytes_of_layer(const Profile& profile, int layer) {
  assert(layer >= 0 && static_cast<std::size_t>(layer) < profile.layers.size() &&
         "input_bytes_of_layer: layer out of range");
  if (layer == 0) return profile.input_bytes;
  return profile.layers[static_cast<std::size_t>(layer) - 1].output_bytes;
}
