#include "planning_request.hpp"

#include "core/error.hpp"
#include "core/names.hpp"
#include "partition/stage_options.hpp"

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

}  // namespace

madpipe::python::PlanningRequest madpipe::python::planning_request_from_json(const json& request) {
  using partition::PlannerOptions;
  PlanningRequest result;
  result.platform = platform_from_json(member(request, "platform"));
  PlannerOptions& options = result.options;
  options.algorithm =
      partition::algorithm_from_string(value_or<std::string>(request, "algorithm", "madpipe"));
  options.scheduler =
      partition::scheduler_from_string(value_or<std::string>(request, "scheduler", "auto"));
  options.split_backward = partition::backward_split_from_string(
      value_or<std::string>(request, "split_backward", "auto"));
  const auto remat =
      value_named(partition::kRematStrategyNames, value_or<std::string>(request, "remat", "none"),
                  "rematerialization strategy", "remat");
  const auto offload = value_named(partition::kOffloadStrategyNames,
                                   value_or<std::string>(request, "offload", "none"),
                                   "offloading strategy", "offload");
  options.remat.rotor = remat == partition::RematStrategy::Rotor;
  options.remat.slots = value_or(request, "remat_slots", options.remat.slots);
  options.remat.host_offload = offload == partition::OffloadStrategy::Host;
  if (options.remat.host_offload && !(result.platform.host_bandwidth_bytes_per_ms > 0))
    throw_invalid("", "offload", "'host' needs the host link's speed: give host_bandwidth");
  options.remat.host_bytes_per_ms = result.platform.host_bandwidth_bytes_per_ms;
  // time_limit=None: no limit, and the same plan on every machine.
  if (request.contains("time_limit") && member(request, "time_limit").is_null()) {
    options.time_limit_s = std::numeric_limits<double>::infinity();
  } else {
    options.time_limit_s = value_or(request, "time_limit", partition::kCommandTimeLimitS);
    if (!(options.time_limit_s > 0))
      throw_invalid("", "time_limit", "must be > 0 seconds (or None: no limit)");
  }
  options.milp.time_limit_s = options.time_limit_s;
  options.milp.backend = value_or<std::string>(request, "milp_backend", "");
  options.gpipe_micro_batches = value_or(request, "micro_batches", 0);
  options.max_k = value_or(request, "max_k", 0);
  if (options.gpipe_micro_batches < 0) throw_invalid("", "micro_batches", "must be >= 0");
  if (options.max_k < 0) throw_invalid("", "max_k", "must be >= 0");
  options.detailed_progress = value_or(request, "verbose", false);
  return result;
}
