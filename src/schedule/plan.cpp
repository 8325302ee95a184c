#include "schedule/plan.hpp"

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <ostream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "schedule/memory.hpp"

using nlohmann::json;
using nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Writing

// Builds the plan in the key order of FORMATS.md. With nlohmann::ordered_json the order is kept;
// with nlohmann::json (what plan_to_json returns) keys come out sorted, which is still fixed.
template <class Json>
static Json plan_json(const madpipe::schedule::Plan& plan) {
  using madpipe::schedule::is_transfer;
  Json j = Json::object();
  j["format"] = madpipe::schedule::kPlanFormat;
  j["profile"] = plan.profile;

  Json platform = Json::object();
  platform["gpus"] = plan.platform.gpus;
  platform["memory_bytes"] = plan.platform.memory_bytes;
  platform["bandwidth_bytes_per_ms"] = plan.platform.bandwidth_bytes_per_ms;
  platform["weight_copies"] = plan.platform.weight_copies;
  if (plan.platform.host_bandwidth_bytes_per_ms > 0)
    platform["host_bandwidth_bytes_per_ms"] = plan.platform.host_bandwidth_bytes_per_ms;
  if (plan.platform.gpus_per_node != 0) platform["gpus_per_node"] = plan.platform.gpus_per_node;
  if (plan.platform.inter_node_bandwidth_bytes_per_ms != 0)
    platform["inter_node_bandwidth_bytes_per_ms"] = plan.platform.inter_node_bandwidth_bytes_per_ms;
  j["platform"] = std::move(platform);
  if (plan.replicas != 1) j["replicas"] = plan.replicas;  // absent: one pipeline, as before

  j["algorithm"] = plan.algorithm;

  Json stages = Json::array();
  for (const madpipe::schedule::Stage& stage : plan.stages) {
    Json s = Json::object();
    s["id"] = stage.id;
    s["first_layer"] = stage.first_layer;
    s["last_layer"] = stage.last_layer;
    s["gpu"] = stage.gpu;
    s["forward_ms"] = stage.forward_ms;
    s["backward_ms"] = stage.backward_ms;
    s["weight_bytes"] = stage.weight_bytes;
    s["stored_bytes"] = stage.stored_bytes;
    s["output_bytes"] = stage.output_bytes;
    s["workspace_bytes"] = stage.workspace_bytes;
    Json remat = Json::object();
    remat["strategy"] = stage.remat;
    s["remat"] = std::move(remat);
    Json offload = Json::object();
    offload["strategy"] = stage.offload;
    s["offload"] = std::move(offload);
    if (!stage.sequence.empty()) s["sequence"] = stage.sequence;
    stages.push_back(std::move(s));
  }
  j["stages"] = std::move(stages);

  Json pattern = Json::object();
  pattern["period_ms"] = plan.pattern.period_ms;
  pattern["k"] = plan.pattern.k;
  Json ops = Json::array();
  for (const madpipe::schedule::Op& op : plan.pattern.ops) {
    Json o = Json::object();
    o["kind"] = madpipe::schedule::to_string(op.kind);
    o["stage"] = op.stage;
    if (is_transfer(op.kind)) {
      o["link"] = Json::array({op.link.a, op.link.b});
    } else {
      o["gpu"] = op.gpu;
    }
    o["start_ms"] = op.start_ms;
    o["duration_ms"] = op.duration_ms;
    o["shift"] = op.shift;
    ops.push_back(std::move(o));
  }
  pattern["ops"] = std::move(ops);
  j["pattern"] = std::move(pattern);

  Json predicted = Json::object();
  predicted["period_ms"] = plan.predicted.period_ms;
  predicted["throughput_per_s"] = plan.predicted.throughput_per_s;
  predicted["lower_bound_period_ms"] = plan.predicted.lower_bound_period_ms;
  Json memory = Json::array();
  for (std::int64_t bytes : plan.predicted.memory_bytes) memory.push_back(bytes);
  predicted["memory_bytes"] = std::move(memory);
  j["predicted"] = std::move(predicted);

  if (plan.solver) {
    Json solver = Json::object();
    solver["backend"] = plan.solver->backend;
    solver["status"] = plan.solver->status;
    solver["objective"] = plan.solver->objective;
    solver["bound"] = plan.solver->bound;
    solver["gap"] = plan.solver->gap;
    solver["seconds"] = plan.solver->seconds;
    j["solver"] = std::move(solver);
  }
  return j;
}

static std::string dump_scalar(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// A container is printed on one line when it is small (at most 8 members) and none of its
// members is a container holding containers: an op, the platform, a stage's remat, predicted and
// solver each take one line, while the plan, the stage list, a stage (12 members) and the op list
// are spread over lines, one member per line.
static bool is_inline(const ordered_json& j) {
  if (!j.is_structured()) return true;
  if (j.is_object() && j.size() > 8) return false;
  for (const ordered_json& child : j)
    if (child.is_structured())
      for (const ordered_json& grandchild : child)
        if (grandchild.is_structured()) return false;
  return true;
}

static void print_inline(const ordered_json& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += dump_scalar(ordered_json(it.key()));
      out += ": ";
      print_inline(it.value(), out);
    }
    out += '}';
    return;
  }
  if (j.is_array()) {
    out += '[';
    bool first = true;
    for (const ordered_json& child : j) {
      if (!first) out += ", ";
      first = false;
      print_inline(child, out);
    }
    out += ']';
    return;
  }
  out += dump_scalar(j);
}

static void print_pretty(const ordered_json& j, int indent, std::string& out) {
  if (is_inline(j) || j.empty()) {
    print_inline(j, out);
    return;
  }
  const std::string inner(static_cast<std::size_t>(indent + 2), ' ');
  const bool object = j.is_object();
  out += object ? "{\n" : "[\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += inner;
    if (object) {
      out += dump_scalar(ordered_json(it.key()));
      out += ": ";
    }
    print_pretty(it.value(), indent + 2, out);
  }
  out += '\n';
  out += std::string(static_cast<std::size_t>(indent), ' ');
  out += object ? '}' : ']';
}

static std::string plan_text(const madpipe::schedule::Plan& plan) {
  std::string out;
  print_pretty(plan_json<ordered_json>(plan), 0, out);
  out += '\n';
  return out;
}

nlohmann::json madpipe::schedule::plan_to_json(const Plan& plan) { return plan_json<json>(plan); }

void madpipe::schedule::write_plan(const Plan& plan, std::ostream& out) {
  out << plan_text(plan);
  if (!out) throw Error(ErrorKind::Io, "", "", "cannot write plan to stream");
}

void madpipe::schedule::write_plan(const Plan& plan, const std::string& path) {
  const std::string text = plan_text(plan);
  write_file_atomically(path, text);
}

// ---------------------------------------------------------------------------------------------
// Reading

static std::string describe(const json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  }
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] static void fail(const std::string& file, const std::string& pointer,
                              const std::string& problem) {
  throw madpipe::Error(madpipe::ErrorKind::InvalidInput, file, pointer, problem);
}

static const json& member(const json& object, const char* key, const std::string& pointer,
                          const std::string& file) {
  const auto it = object.find(key);
  if (it == object.end()) fail(file, pointer + "/" + key, "missing required field");
  return *it;
}

static const json& object_member(const json& object, const char* key, const std::string& pointer,
                                 const std::string& file) {
  const json& v = member(object, key, pointer, file);
  if (!v.is_object()) fail(file, pointer + "/" + key, "must be an object, got " + describe(v));
  return v;
}

static const json& array_member(const json& object, const char* key, const std::string& pointer,
                                const std::string& file) {
  const json& v = member(object, key, pointer, file);
  if (!v.is_array()) fail(file, pointer + "/" + key, "must be an array, got " + describe(v));
  return v;
}

static std::string string_value(const json& v, const std::string& pointer,
                                const std::string& file) {
  if (!v.is_string()) fail(file, pointer, "must be a string, got " + describe(v));
  return v.get<std::string>();
}

static std::string string_member(const json& object, const char* key, const std::string& pointer,
                                 const std::string& file) {
  return string_value(member(object, key, pointer, file), pointer + "/" + key, file);
}

namespace {
enum class Sign { Any, NonNegative, Positive };
}  // namespace

static double double_value(const json& v, Sign sign, const std::string& pointer,
                           const std::string& file) {
  const char* requirement = sign == Sign::Positive      ? "must be a finite number > 0"
                            : sign == Sign::NonNegative ? "must be a finite number >= 0"
                                                        : "must be a finite number";
  if (!v.is_number()) fail(file, pointer, std::string(requirement) + ", got " + describe(v));
  const double d = v.get<double>();
  const bool ok = std::isfinite(d) && (sign == Sign::Any || (sign == Sign::NonNegative && d >= 0) ||
                                       (sign == Sign::Positive && d > 0));
  if (!ok) fail(file, pointer, std::string(requirement) + ", got " + describe(v));
  return d;
}

static double double_member(const json& object, const char* key, Sign sign,
                            const std::string& pointer, const std::string& file) {
  return double_value(member(object, key, pointer, file), sign, pointer + "/" + key, file);
}

// Integers may be written as integral floating-point numbers ("7.9e9"), which some tools emit.
static std::int64_t int64_value(const json& v, std::int64_t min, std::int64_t max,
                                const std::string& pointer, const std::string& file) {
  std::string requirement = "must be an integer";
  if (min >= 0) requirement += " >= " + std::to_string(min);
  bool ok = false;
  std::int64_t value = 0;
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    value = v.get<std::int64_t>();
    ok = true;
  } else if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    ok = u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    value = ok ? static_cast<std::int64_t>(u) : 0;
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    ok = std::isfinite(d) && std::floor(d) == d && d >= -9.2e18 && d <= 9.2e18;
    value = ok ? static_cast<std::int64_t>(d) : 0;
  }
  if (!ok || value < min || value > max) fail(file, pointer, requirement + ", got " + describe(v));
  return value;
}

static std::int64_t int64_member(const json& object, const char* key, std::int64_t min,
                                 const std::string& pointer, const std::string& file) {
  return int64_value(member(object, key, pointer, file), min,
                     std::numeric_limits<std::int64_t>::max(), pointer + "/" + key, file);
}

static int int_member(const json& object, const char* key, int min, const std::string& pointer,
                      const std::string& file) {
  return static_cast<int>(
      int64_value(member(object, key, pointer, file), min, INT_MAX, pointer + "/" + key, file));
}

// Optional {"strategy": "..."} object; "none" when absent.
static std::string strategy_member(const json& object, const char* key,
                                   const std::string& pointer, const std::string& file) {
  const auto it = object.find(key);
  if (it == object.end()) return "none";
  const std::string here = pointer + "/" + key;
  if (!it->is_object()) fail(file, here, "must be an object, got " + describe(*it));
  return string_member(*it, "strategy", here, file);
}

static madpipe::Platform read_platform(const json& j, const std::string& file) {
  const std::string p = "/platform";
  const json& o = object_member(j, "platform", "", file);
  madpipe::Platform platform;
  platform.gpus = int_member(o, "gpus", 1, p, file);
  platform.memory_bytes = int64_member(o, "memory_bytes", 1, p, file);
  platform.bandwidth_bytes_per_ms = double_member(o, "bandwidth_bytes_per_ms", Sign::Positive, p, file);
  platform.weight_copies = int_member(o, "weight_copies", 1, p, file);
  if (o.contains("host_bandwidth_bytes_per_ms"))
    platform.host_bandwidth_bytes_per_ms =
        double_member(o, "host_bandwidth_bytes_per_ms", Sign::Positive, p, file);
  // Multi-node platforms; 0 (or absent): one node, and the same bandwidth between nodes.
  if (o.contains("gpus_per_node"))
    platform.gpus_per_node = int_member(o, "gpus_per_node", 0, p, file);
  if (o.contains("inter_node_bandwidth_bytes_per_ms"))
    platform.inter_node_bandwidth_bytes_per_ms =
        double_member(o, "inter_node_bandwidth_bytes_per_ms", Sign::NonNegative, p, file);
  return platform;
}

static madpipe::schedule::Stage read_stage(const json& o, const std::string& p,
                                           const std::string& file) {
  if (!o.is_object()) fail(file, p, "must be an object, got " + describe(o));
  madpipe::schedule::Stage stage;
  stage.id = int_member(o, "id", 0, p, file);
  stage.first_layer = int_member(o, "first_layer", 0, p, file);
  stage.last_layer = int_member(o, "last_layer", 0, p, file);
  stage.gpu = int_member(o, "gpu", 0, p, file);
  stage.forward_ms = double_member(o, "forward_ms", Sign::NonNegative, p, file);
  stage.backward_ms = double_member(o, "backward_ms", Sign::NonNegative, p, file);
  stage.weight_bytes = int64_member(o, "weight_bytes", 0, p, file);
  stage.stored_bytes = int64_member(o, "stored_bytes", 0, p, file);
  stage.output_bytes = int64_member(o, "output_bytes", 0, p, file);
  if (o.contains("workspace_bytes")) stage.workspace_bytes = int64_member(o, "workspace_bytes", 0, p, file);
  stage.remat = strategy_member(o, "remat", p, file);
  stage.offload = strategy_member(o, "offload", p, file);
  if (o.contains("sequence")) stage.sequence = string_member(o, "sequence", p, file);
  return stage;
}

static madpipe::schedule::Op read_op(const json& o, const std::string& p, const std::string& file) {
  using madpipe::schedule::OpKind;
  if (!o.is_object()) fail(file, p, "must be an object, got " + describe(o));
  madpipe::schedule::Op op;
  const std::string kind = string_member(o, "kind", p, file);
  try {
    op.kind = madpipe::schedule::op_kind_from_string(kind);
  } catch (const madpipe::Error& e) {
    fail(file, p + "/kind", e.problem());
  }
  op.stage = int_member(o, "stage", 0, p, file);
  if (madpipe::schedule::is_transfer(op.kind)) {
    const json& link = array_member(o, "link", p, file);
    if (link.size() != 2)
      fail(file, p + "/link", "must be an array of two gpu indices, got " + describe(link));
    op.link.a = static_cast<int>(int64_value(link[0], 0, INT_MAX, p + "/link/0", file));
    op.link.b = static_cast<int>(int64_value(link[1], 0, INT_MAX, p + "/link/1", file));
  } else {
    op.gpu = int_member(o, "gpu", 0, p, file);
  }
  op.start_ms = double_member(o, "start_ms", Sign::NonNegative, p, file);
  op.duration_ms = double_member(o, "duration_ms", Sign::NonNegative, p, file);
  op.shift = static_cast<int>(int64_value(member(o, "shift", p, file), INT_MIN, INT_MAX,
                                          p + "/shift", file));
  return op;
}

static madpipe::schedule::Pattern read_pattern(const json& j, const std::string& file) {
  const std::string p = "/pattern";
  const json& o = object_member(j, "pattern", "", file);
  madpipe::schedule::Pattern pattern;
  pattern.period_ms = double_member(o, "period_ms", Sign::Positive, p, file);
  pattern.k = int_member(o, "k", 1, p, file);
  const json& ops = array_member(o, "ops", p, file);
  for (std::size_t i = 0; i < ops.size(); ++i)
    pattern.ops.push_back(read_op(ops[i], p + "/ops/" + std::to_string(i), file));
  return pattern;
}

static madpipe::schedule::Predicted read_predicted(const json& j, const std::string& file) {
  const std::string p = "/predicted";
  const json& o = object_member(j, "predicted", "", file);
  madpipe::schedule::Predicted predicted;
  predicted.period_ms = double_member(o, "period_ms", Sign::NonNegative, p, file);
  predicted.throughput_per_s = double_member(o, "throughput_per_s", Sign::NonNegative, p, file);
  predicted.lower_bound_period_ms =
      double_member(o, "lower_bound_period_ms", Sign::NonNegative, p, file);
  const json& memory = array_member(o, "memory_bytes", p, file);
  for (std::size_t g = 0; g < memory.size(); ++g)
    predicted.memory_bytes.push_back(int64_value(memory[g], 0,
                                                 std::numeric_limits<std::int64_t>::max(),
                                                 p + "/memory_bytes/" + std::to_string(g), file));
  return predicted;
}

static madpipe::schedule::SolverInfo read_solver(const json& o, const std::string& file) {
  const std::string p = "/solver";
  if (!o.is_object()) fail(file, p, "must be an object, got " + describe(o));
  madpipe::schedule::SolverInfo solver;
  solver.backend = string_member(o, "backend", p, file);
  solver.status = string_member(o, "status", p, file);
  static const char* const kStatuses[] = {"optimal", "feasible", "infeasible", "timeout", "error"};
  bool known = false;
  for (const char* status : kStatuses) known = known || solver.status == status;
  if (!known)
    fail(file, p + "/status",
         "unknown solver status '" + solver.status +
             "' (valid: optimal, feasible, infeasible, timeout, error)");
  solver.objective = double_member(o, "objective", Sign::Any, p, file);
  solver.bound = double_member(o, "bound", Sign::Any, p, file);
  solver.gap = double_member(o, "gap", Sign::Any, p, file);
  solver.seconds = double_member(o, "seconds", Sign::NonNegative, p, file);
  return solver;
}

madpipe::schedule::Plan madpipe::schedule::plan_from_json(const nlohmann::json& j,
                                                          const std::string& file) {
  if (!j.is_object()) fail(file, "", "must be a JSON object, got " + describe(j));
  const std::string format = string_member(j, "format", "", file);
  if (format != kPlanFormat)
    fail(file, "/format",
         std::string("must be \"") + kPlanFormat + "\", got \"" + format + "\"");
  Plan plan;
  plan.profile = string_member(j, "profile", "", file);
  plan.platform = read_platform(j, file);
  if (j.contains("replicas")) {
    plan.replicas = int_member(j, "replicas", 1, "", file);
    if (static_cast<std::int64_t>(plan.replicas) * plan.platform.gpus > INT_MAX)
      fail(file, "/replicas",
           "replicas x platform gpus must be at most " + std::to_string(INT_MAX) + ", got " +
               std::to_string(plan.replicas) + " x " + std::to_string(plan.platform.gpus));
  }
  plan.algorithm = string_member(j, "algorithm", "", file);
  const json& stages = array_member(j, "stages", "", file);
  for (std::size_t s = 0; s < stages.size(); ++s)
    plan.stages.push_back(read_stage(stages[s], "/stages/" + std::to_string(s), file));
  plan.pattern = read_pattern(j, file);
  plan.predicted = read_predicted(j, file);
  const auto solver = j.find("solver");
  if (solver != j.end()) plan.solver = read_solver(*solver, file);
  return plan;
}

madpipe::schedule::Plan madpipe::schedule::read_plan(const std::string& path) {
  return plan_from_json(read_json_file(path), path);
}

void madpipe::schedule::fill_predicted(Plan& plan, double lower_bound_period_ms) {
  Predicted& predicted = plan.predicted;
  const int k = plan.pattern.k > 0 ? plan.pattern.k : 1;
  predicted.period_ms = plan.pattern.period_ms / k;
  predicted.throughput_per_s = predicted.period_ms > 0 ? 1000.0 / predicted.period_ms : 0.0;
  predicted.lower_bound_period_ms = lower_bound_period_ms;
  predicted.memory_bytes = totals(evaluate_memory(plan.stages, plan.pattern, plan.platform));
}
