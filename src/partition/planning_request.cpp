#include "partition/planning_request.hpp"

#include "core/error.hpp"
#include "core/names.hpp"
#include "partition/stage_options.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <sstream>

namespace {

using madpipe::partition::PlannerOptions;

int integer(const std::string& value, const std::string& label) {
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || parsed < -2147483647L ||
      parsed > 2147483647L)
    madpipe::throw_invalid("", label, "expected an integer, got '" + value + "'");
  return static_cast<int>(parsed);
}

int integer_at_least(int min, const std::string& value, const std::string& label) {
  const int parsed = integer(value, label);
  if (parsed < min)
    madpipe::throw_invalid("", label,
                           "must be >= " + std::to_string(min) + ", got " + std::to_string(parsed));
  return parsed;
}

double number(const std::string& value, const std::string& label) {
  char* end = nullptr;
  const double parsed = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0')
    madpipe::throw_invalid("", label, "expected a number, got '" + value + "'");
  return parsed;
}

bool boolean(const std::string& value, const std::string& label) {
  if (value == "true" || value == "1" || value == "yes" || value == "on") return true;
  if (value == "false" || value == "0" || value == "no" || value == "off") return false;
  madpipe::throw_invalid("", label, "expected true or false, got '" + value + "'");
}

std::string text_of(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// A name of `parse`'s table; its Error (which lists the names) is reported for `label`.
template <typename Parse>
auto named(Parse parse, const std::string& value, const std::string& label) {
  try {
    return parse(value);
  } catch (const madpipe::Error& e) {
    madpipe::throw_invalid("", label, e.problem());
  }
}

struct Field {
  const char* key;
  std::function<void(PlannerOptions&, const std::string& value, const std::string& label)> set;
  std::function<std::string(const PlannerOptions&)> text;
};

const std::vector<Field>& fields() {
  using namespace madpipe::partition;
  using O = PlannerOptions;
  using S = const std::string&;
  static const std::vector<Field> table{
      {"algorithm", [](O& o, S v, S l) { o.algorithm = named(algorithm_from_string, v, l); },
       [](const O& o) { return std::string(to_string(o.algorithm)); }},
      {"micro-batches",
       [](O& o, S v, S l) { o.micro_batches_per_step = integer_at_least(0, v, l); },
       [](const O& o) { return std::to_string(o.micro_batches_per_step); }},
      {"max-k", [](O& o, S v, S l) { o.max_k = integer_at_least(0, v, l); },
       [](const O& o) { return std::to_string(o.max_k); }},
      {"scheduler", [](O& o, S v, S l) { o.scheduler = named(scheduler_from_string, v, l); },
       [](const O& o) { return std::string(to_string(o.scheduler)); }},
      {"split-backward",
       [](O& o, S v, S l) { o.split_backward = named(backward_split_from_string, v, l); },
       [](const O& o) { return std::string(to_string(o.split_backward)); }},
      {"solver", [](O& o, S v, S) { o.milp.backend = v; },
       [](const O& o) { return o.milp.backend; }},
      {"time-limit",
       [](O& o, S v, S l) {
         const double seconds = number(v, l);
         if (!(seconds > 0)) madpipe::throw_invalid("", l, "must be > 0 seconds");
         o.time_limit_s = seconds;
         o.milp.time_limit_s = seconds;
       },
       [](const O& o) { return text_of(o.time_limit_s); }},
      {"gap",
       [](O& o, S v, S l) {
         const double gap = number(v, l);
         if (!(gap >= 0 && gap < 1)) madpipe::throw_invalid("", l, "must be in [0, 1)");
         o.milp.relative_gap = gap;
       },
       [](const O& o) { return text_of(o.milp.relative_gap); }},
      {"solver-threads", [](O& o, S v, S l) { o.milp.threads = integer_at_least(1, v, l); },
       [](const O& o) { return std::to_string(o.milp.threads); }},
      {"solver-log", [](O& o, S v, S l) { o.milp.log = boolean(v, l); },
       [](const O& o) { return std::string(o.milp.log ? "true" : "false"); }},
      {"verbose", [](O& o, S v, S l) { o.detailed_progress = boolean(v, l); },
       [](const O& o) { return std::string(o.detailed_progress ? "true" : "false"); }},
      {"write-mps", [](O& o, S v, S) { o.milp.mps_prefix = v; },
       [](const O& o) { return o.milp.mps_prefix; }},
      {"remat",
       [](O& o, S v, S l) {
         o.remat.remat = madpipe::value_named(kRematStrategyNames, v, "strategy", l);
       },
       [](const O& o) {
         return std::string(madpipe::name_of(kRematStrategyNames, o.remat.remat));
       }},
      {"offload",
       [](O& o, S v, S l) {
         o.remat.offload = madpipe::value_named(kOffloadStrategyNames, v, "strategy", l);
       },
       [](const O& o) {
         return std::string(madpipe::name_of(kOffloadStrategyNames, o.remat.offload));
       }},
      {"remat-slots", [](O& o, S v, S l) { o.remat.slots = integer_at_least(10, v, l); },
       [](const O& o) { return std::to_string(o.remat.slots); }},
      {"time-steps",
       [](O& o, S v, S l) { o.discretization.time_steps = integer_at_least(2, v, l); },
       [](const O& o) { return std::to_string(o.discretization.time_steps); }},
      {"delay-steps",
       [](O& o, S v, S l) { o.discretization.delay_steps = integer_at_least(2, v, l); },
       [](const O& o) { return std::to_string(o.discretization.delay_steps); }},
      {"memory-steps",
       [](O& o, S v, S l) { o.discretization.memory_steps = integer_at_least(2, v, l); },
       [](const O& o) { return std::to_string(o.discretization.memory_steps); }},
      {"iterations",
       [](O& o, S v, S l) { o.discretization.iterations = integer_at_least(1, v, l); },
       [](const O& o) { return std::to_string(o.discretization.iterations); }},
  };
  return table;
}

const Field& field(const std::string& key, const std::string& label) {
  const std::vector<Field>& table = fields();
  const auto it =
      std::find_if(table.begin(), table.end(), [&key](const Field& f) { return key == f.key; });
  if (it == table.end()) {
    std::string keys;
    for (const Field& f : table) keys += std::string(keys.empty() ? "" : ", ") + f.key;
    madpipe::throw_invalid("", label, "unknown planner option (valid: " + keys + ")");
  }
  return *it;
}

}  // namespace

madpipe::partition::PlannerOptions madpipe::partition::request_planner_options() {
  PlannerOptions options;
  options.time_limit_s = kCommandTimeLimitS;
  options.milp.time_limit_s = kCommandTimeLimitS;
  return options;
}

const std::vector<std::string>& madpipe::partition::request_field_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const Field& f : fields()) out.emplace_back(f.key);
    return out;
  }();
  return keys;
}

void madpipe::partition::set_request_field(PlannerOptions& options, const std::string& key,
                                           const std::string& value, const std::string& label) {
  field(key, label).set(options, value, label);
}

std::string madpipe::partition::request_field_text(const PlannerOptions& options,
                                                   const std::string& key) {
  return field(key, key).text(options);
}

void madpipe::partition::attach_platform(PlannerOptions& options, const Platform& platform,
                                         const std::string& offload_label,
                                         const std::string& host_bandwidth_label) {
  if (options.remat.offload == OffloadStrategy::Host && !(platform.host_bandwidth_bytes_per_ms > 0))
    throw_invalid("", offload_label,
                  "host needs the host link's speed: give " + host_bandwidth_label);
  options.remat.host_bytes_per_ms = platform.host_bandwidth_bytes_per_ms;
}

std::vector<madpipe::partition::Algorithm> madpipe::partition::compared_algorithms() {
  std::vector<Algorithm> algorithms = all_algorithms();
  algorithms.erase(std::remove(algorithms.begin(), algorithms.end(), Algorithm::Ilp),
                   algorithms.end());
  return algorithms;
}

std::string madpipe::partition::algorithm_list(const std::vector<Algorithm>& algorithms,
                                               const std::string& last_word) {
  std::string list;
  for (std::size_t i = 0; i < algorithms.size(); ++i) {
    const char* separator = i == 0 ? "" : i + 1 == algorithms.size() ? " " : ", ";
    list += separator;
    if (i > 0 && i + 1 == algorithms.size()) list += last_word + " ";
    list += to_string(algorithms[i]);
  }
  return list;
}
