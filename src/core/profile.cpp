#include "core/profile.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/json_reader.hpp"
#include "core/units.hpp"

#include <algorithm>
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

using madpipe::JsonReader;

// A size in bytes: a JSON integer, or a float with an integral value, in [0, 2^62).
static std::int64_t size_value(const JsonReader& reader, const json& value,
                               const std::string& pointer) {
  if (value.is_number_unsigned()) {
    const auto bytes = value.get<std::uint64_t>();
    if (bytes >= static_cast<std::uint64_t>(kMaxBytes)) {
      reader.fail(pointer, "must be below 2^62, got " + reader.show(value));
    }
    return static_cast<std::int64_t>(bytes);
  }
  if (value.is_number_integer()) {
    const auto bytes = value.get<std::int64_t>();
    if (bytes < 0) reader.fail(pointer, "must be an integer >= 0, got " + reader.show(value));
    if (bytes >= kMaxBytes) reader.fail(pointer, "must be below 2^62, got " + reader.show(value));
    return bytes;
  }
  if (value.is_number_float()) {
    const double bytes = value.get<double>();
    if (!std::isfinite(bytes) || bytes != std::floor(bytes)) {
      reader.fail(pointer, "must be an integer, got " + reader.show(value));
    }
    if (bytes < 0) reader.fail(pointer, "must be an integer >= 0, got " + reader.show(value));
    if (bytes >= kMaxBytesDouble) {
      reader.fail(pointer, "must be below 2^62, got " + reader.show(value));
    }
    return static_cast<std::int64_t>(bytes);
  }
  reader.fail(pointer, "must be an integer, got " + reader.show_wrong_type(value));
}

static std::int64_t required_size(const JsonReader& reader, const json& object,
                                  const std::string& pointer, const char* key) {
  return size_value(reader, reader.require(object, pointer, key), pointer + "/" + key);
}

static std::int64_t optional_size(const JsonReader& reader, const json& object,
                                  const std::string& pointer, const char* key) {
  const json* value = JsonReader::find(object, key);
  return value == nullptr ? 0 : size_value(reader, *value, pointer + "/" + key);
}

// The document's member `key` ("batch", "seq"): a positive integer, 0 when absent.
static int optional_count(const JsonReader& reader, const json& object, const char* key) {
  const json* value = JsonReader::find(object, key);
  if (value == nullptr) return 0;
  const std::string pointer = std::string("/") + key;
  if (!value->is_number()) {
    reader.fail(pointer, "must be a positive integer, got " + reader.show_wrong_type(*value));
  }
  const double count = value->get<double>();
  if (!(count >= 1 && count <= INT_MAX && count == std::floor(count))) {
    reader.fail(pointer, "must be a positive integer, got " + reader.show(*value));
  }
  return static_cast<int>(count);
}

// backward_input_ms and backward_weight_ms come together and add up to backward_ms (to a
// relative 1e-6: writers round); backward_weight_kept_bytes only with them.
static std::optional<madpipe::SplitBackward> read_split_backward(const JsonReader& reader,
                                                                 const json& object,
                                                                 const std::string& pointer,
                                                                 double backward_ms) {
  const bool has_input = JsonReader::find(object, "backward_input_ms") != nullptr;
  const bool has_weight = JsonReader::find(object, "backward_weight_ms") != nullptr;
  if (!has_input && !has_weight) {
    if (JsonReader::find(object, "backward_weight_kept_bytes") != nullptr) {
      reader.fail(pointer + "/backward_weight_kept_bytes",
                  "needs backward_input_ms and backward_weight_ms");
    }
    return std::nullopt;
  }
  if (!has_input)
    reader.fail(pointer + "/backward_input_ms", "missing (backward_weight_ms is given)");
  if (!has_weight)
    reader.fail(pointer + "/backward_weight_ms", "missing (backward_input_ms is given)");
  const auto non_negative = JsonReader::Sign::NonNegative;
  madpipe::SplitBackward split;
  split.input_ms = reader.number_member(object, pointer, "backward_input_ms", non_negative);
  split.weight_ms = reader.number_member(object, pointer, "backward_weight_ms", non_negative);
  split.kept_bytes = optional_size(reader, object, pointer, "backward_weight_kept_bytes");
  const double sum = split.input_ms + split.weight_ms;
  if (std::fabs(sum - backward_ms) > 1e-6 * std::max(1.0, backward_ms)) {
    reader.fail(pointer + "/backward_weight_ms",
                "backward_input_ms + backward_weight_ms must equal backward_ms (" +
                    madpipe::format_number(backward_ms) + "), got " + madpipe::format_number(sum));
  }
  return split;
}

static madpipe::Layer read_layer(const JsonReader& reader, const json& value,
                                 const std::string& pointer) {
  const json& object = reader.object_value(value, pointer);
  madpipe::Layer out;
  out.name = reader.string_member(object, pointer, "name");
  const auto non_negative = JsonReader::Sign::NonNegative;
  out.forward_ms = reader.number_member(object, pointer, "forward_ms", non_negative);
  out.backward_ms = reader.number_member(object, pointer, "backward_ms", non_negative);
  out.weight_bytes = required_size(reader, object, pointer, "weight_bytes");
  out.output_bytes = required_size(reader, object, pointer, "output_bytes");
  out.saved_bytes = optional_size(reader, object, pointer, "saved_bytes");
  out.forward_workspace_bytes = optional_size(reader, object, pointer, "forward_workspace_bytes");
  out.backward_workspace_bytes = optional_size(reader, object, pointer, "backward_workspace_bytes");
  out.split_backward = read_split_backward(reader, object, pointer, out.backward_ms);
  return out;
}

bool madpipe::operator==(const SplitBackward& a, const SplitBackward& b) {
  return a.input_ms == b.input_ms && a.weight_ms == b.weight_ms && a.kept_bytes == b.kept_bytes;
}

bool madpipe::operator==(const Layer& a, const Layer& b) {
  return a.name == b.name && a.forward_ms == b.forward_ms && a.backward_ms == b.backward_ms &&
         a.weight_bytes == b.weight_bytes && a.output_bytes == b.output_bytes &&
         a.saved_bytes == b.saved_bytes && a.forward_workspace_bytes == b.forward_workspace_bytes &&
         a.backward_workspace_bytes == b.backward_workspace_bytes &&
         a.split_backward == b.split_backward;
}

bool madpipe::operator==(const TiedWeight& a, const TiedWeight& b) {
  return a.layers == b.layers && a.bytes == b.bytes;
}

bool madpipe::operator==(const Profile& a, const Profile& b) {
  return a.name == b.name && a.device == b.device && a.dtype == b.dtype && a.batch == b.batch &&
         a.input_bytes == b.input_bytes && a.layers == b.layers && a.source == b.source &&
         a.seq == b.seq && a.tied_weights == b.tied_weights;
}

static std::string file_stem(const std::string& file) {
  if (file.empty()) return "";
  return std::filesystem::path(file).stem().string();
}

// Sums along the chain must stay below 2^62 too (ChainCosts keeps prefix sums of them).
static void check_sums(const JsonReader& reader, const madpipe::Profile& profile) {
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

// "tied_weights": [{"layers": [0, 81], "bytes": N}, ...]: ascending layer indices, at least two,
// each layer in one group at most, bytes > 0 and within each of those layers' weight_bytes.
static std::vector<madpipe::TiedWeight> read_tied_weights(
    const JsonReader& reader, const json& document, const std::vector<madpipe::Layer>& layers) {
  std::vector<madpipe::TiedWeight> groups;
  const json* value = JsonReader::find(document, "tied_weights");
  if (value == nullptr) return groups;
  if (!value->is_array())
    reader.fail("/tied_weights", "must be an array, got " + reader.show_wrong_type(*value));
  std::vector<int> group_of(layers.size(), -1);
  for (std::size_t g = 0; g < value->size(); ++g) {
    const std::string pointer = "/tied_weights/" + std::to_string(g);
    const json& object = reader.object_value((*value)[g], pointer);
    madpipe::TiedWeight group;
    const json& members = reader.require(object, pointer, "layers");
    if (!members.is_array() || members.size() < 2) {
      reader.fail(pointer + "/layers",
                  "must be an array of at least two layer indices, got " + reader.show(members));
    }
    for (std::size_t i = 0; i < members.size(); ++i) {
      const std::string at = pointer + "/layers/" + std::to_string(i);
      const json& member = members[i];
      if (!member.is_number_integer() || member.get<std::int64_t>() < 0 ||
          member.get<std::int64_t>() >= static_cast<std::int64_t>(layers.size())) {
        reader.fail(at, "must be a layer index in [0, " + std::to_string(layers.size() - 1) +
                            "], got " + reader.show(member));
      }
      const int layer = member.get<int>();
      if (!group.layers.empty() && layer <= group.layers.back())
        reader.fail(at, "layer indices must be ascending, got " + reader.show(members));
      if (group_of[layer] >= 0) {
        reader.fail(at, "layer " + std::to_string(layer) + " is already in tied_weights/" +
                            std::to_string(group_of[layer]));
      }
      group_of[layer] = static_cast<int>(g);
      group.layers.push_back(layer);
    }
    group.bytes = required_size(reader, object, pointer, "bytes");
    if (group.bytes == 0) reader.fail(pointer + "/bytes", "must be > 0, got 0");
    for (int layer : group.layers) {
      if (group.bytes > layers[layer].weight_bytes) {
        reader.fail(pointer + "/bytes",
                    "must be at most the weight_bytes of each of its layers (every layer counts "
                    "the shared weight), but layer " +
                        std::to_string(layer) + " (" + layers[layer].name + ") has " +
                        std::to_string(layers[layer].weight_bytes) + ", got " +
                        std::to_string(group.bytes));
      }
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

madpipe::Profile madpipe::profile_from_json(const json& j, const std::string& file) {
  JsonReaderStyle style;
  style.name_wrong_type = true;  // "must be a string, got number"
  const JsonReader reader{file, style};
  reader.require_document(j);
  reader.require_format(j, kProfileFormat);

  Profile profile;
  profile.name = reader.optional_string(j, "name", file_stem(file));
  profile.device = reader.optional_string(j, "device", "");
  profile.dtype = reader.optional_string(j, "dtype", "");
  profile.source = reader.optional_string(j, "source", "");
  profile.batch = optional_count(reader, j, "batch");
  profile.seq = optional_count(reader, j, "seq");
  profile.input_bytes = required_size(reader, j, "", "input_bytes");

  const json& layers = reader.require(j, "", "layers");
  if (!layers.is_array()) {
    reader.fail("/layers", "must be a non-empty array, got " + reader.show_wrong_type(layers));
  }
  if (layers.empty()) reader.fail("/layers", "must be a non-empty array, got []");
  if (layers.size() > kMaxLayers) {
    reader.fail("/layers", "has " + std::to_string(layers.size()) + " layers, at most " +
                               std::to_string(kMaxLayers) + " are supported");
  }
  profile.layers.reserve(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    profile.layers.push_back(read_layer(reader, layers[l], "/layers/" + std::to_string(l)));
  }
  check_sums(reader, profile);
  profile.tied_weights = read_tied_weights(reader, j, profile.layers);
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
  if (!profile.source.empty()) out["source"] = profile.source;
  if (profile.batch > 0) out["batch"] = profile.batch;  // 0: unknown, left out
  if (profile.seq > 0) out["seq"] = profile.seq;
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
    if (layer.split_backward) {  // absent: the file is byte for byte a profile without it
      entry["backward_input_ms"] = layer.split_backward->input_ms;
      entry["backward_weight_ms"] = layer.split_backward->weight_ms;
      entry["backward_weight_kept_bytes"] = layer.split_backward->kept_bytes;
    }
    layers.push_back(std::move(entry));
  }
  out["layers"] = std::move(layers);
  if (!profile.tied_weights.empty()) {  // absent: the file is byte for byte a profile without it
    nlohmann::ordered_json groups = nlohmann::ordered_json::array();
    for (const madpipe::TiedWeight& group : profile.tied_weights)
      groups.push_back({{"layers", group.layers}, {"bytes", group.bytes}});
    out["tied_weights"] = std::move(groups);
  }
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

void madpipe::set_backward_ms(Layer& layer, double backward_ms) {
  if (layer.split_backward) {
    SplitBackward& split = *layer.split_backward;
    split.weight_ms = layer.backward_ms > 0 ? backward_ms * split.weight_ms / layer.backward_ms : 0;
    split.input_ms = backward_ms - split.weight_ms;
  }
  layer.backward_ms = backward_ms;
}
