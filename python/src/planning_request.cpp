#include "planning_request.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

const json& member(const json& object, const char* key) {
  static const json kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

template <typename T>
T value_or(const json& object, const char* key, T fallback) {
  const json& value = member(object, key);
  if (value.is_null()) return fallback;
  try {
    return value.get<T>();
  } catch (const json::exception&) {
    madpipe::throw_invalid("", key, "has the wrong type: " + value.dump());
  }
}

madpipe::Platform platform_from_json(const json& j) {
  if (!j.is_object()) madpipe::throw_invalid("", "platform", "missing");
  madpipe::Platform platform;
  platform.gpus = value_or(j, "gpus", 0);
  platform.memory_bytes = value_or<std::int64_t>(j, "memory_bytes", 0);
  platform.bandwidth_bytes_per_ms = value_or(j, "bandwidth_bytes_per_ms", 0.0);
  platform.weight_copies = value_or(j, "weight_copies", platform.weight_copies);
  platform.host_bandwidth_bytes_per_ms = value_or(j, "host_bandwidth_bytes_per_ms", 0.0);
  platform.gpus_per_node = value_or(j, "gpus_per_node", 0);
  platform.inter_node_bandwidth_bytes_per_ms =
      value_or(j, "inter_node_bandwidth_bytes_per_ms", 0.0);
  // The keywords of madpipe.plan() are memory= and bandwidth=; the fields name them.
  for (const madpipe::PlatformProblem& p : madpipe::platform_problems(platform)) {
    const std::string keyword = p.field == "memory_bytes"                  ? "memory"
                                : p.field == "bandwidth_bytes_per_ms"      ? "bandwidth"
                                : p.field == "host_bandwidth_bytes_per_ms" ? "host_bandwidth"
                                : p.field == "inter_node_bandwidth_bytes_per_ms"
                                    ? "inter_node_bandwidth"
                                    : p.field;
    madpipe::throw_invalid("", keyword, p.problem);
  }
  return platform;
}

// The value as set_request_field() reads it: "rotor", "200", "true".
std::string text_of(const json& value, const std::string& keyword) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number()) return value.dump();
  madpipe::throw_invalid("", keyword, "has the wrong type: " + value.dump());
}

}  // namespace

std::string madpipe::python::request_key(const std::string& keyword) {
  if (keyword == "milp_backend") return "solver";
  std::string key = keyword;
  std::replace(key.begin(), key.end(), '_', '-');
  return key;
}

madpipe::partition::PlanningRequest madpipe::python::planning_request_from_json(
    const json& request) {
  partition::PlanningRequest result;
  result.platform = platform_from_json(member(request, "platform"));
  for (const auto& [keyword, value] : request.items()) {
    if (keyword == "platform") continue;
    if (keyword == "time_limit" && value.is_null()) {  // None: no limit, the same plan everywhere
      result.options.time_limit_s = std::numeric_limits<double>::infinity();
      result.options.milp.time_limit_s = result.options.time_limit_s;
      continue;
    }
    if (value.is_null()) continue;
    partition::set_request_field(result.options, request_key(keyword), text_of(value, keyword),
                                 keyword);
  }
  partition::attach_platform(result.options, result.platform, "offload", "host_bandwidth");
  return result;
}
