#include "plan/plan.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/json_reader.hpp"
#include "schedule/memory.hpp"
#include "schedule/shared_weights.hpp"

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

using nlohmann::json;
using nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Writing

// Builds the plan in the key order of FORMATS.md. With nlohmann::ordered_json the order is kept;
// with nlohmann::json (what plan_to_json returns) keys come out sorted, which is still fixed.
template <class Json>
static Json plan_json(const madpipe::plan::Plan& plan) {
  using madpipe::schedule::is_transfer;
  Json j = Json::object();
  j["format"] = madpipe::plan::kPlanFormat;
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
    if (stage.splits_backward()) {  // absent: B is the whole backward, as before
      s["backward_weight_ms"] = stage.backward_weight_ms;
      s["weight_kept_bytes"] = stage.weight_kept_bytes;
    }
    s["weight_bytes"] = stage.weight_bytes;
    s["stored_bytes"] = stage.stored_bytes;
    s["output_bytes"] = stage.output_bytes;
    s["workspace_bytes"] = stage.workspace_bytes;
    if (!stage.shared_weights.empty()) {  // absent: no tied weight, as before
      Json shared = Json::array();
      for (const madpipe::schedule::SharedWeight& weight : stage.shared_weights)
        shared.push_back(Json::object({{"group", weight.group}, {"bytes", weight.bytes}}));
      s["shared_weights"] = std::move(shared);
    }
    Json remat = Json::object();
    remat["strategy"] = madpipe::name_of(madpipe::schedule::kRematStrategyNames, stage.remat);
    s["remat"] = std::move(remat);
    Json offload = Json::object();
    offload["strategy"] = madpipe::name_of(madpipe::schedule::kOffloadStrategyNames, stage.offload);
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

  if (plan.step_order) {  // absent: the step follows the pattern, as before
    Json order = Json::object();
    order["micro_batches"] = plan.step_order->micro_batches;
    Json gpus = Json::array();
    for (const std::vector<madpipe::schedule::StepAction>& actions : plan.step_order->per_gpu) {
      Json tokens = Json::array();
      for (const madpipe::schedule::StepAction& action : actions)
        tokens.push_back(madpipe::schedule::to_string(action));
      gpus.push_back(std::move(tokens));
    }
    order["gpus"] = std::move(gpus);
    if (!plan.step_order->per_link.empty()) {  // absent: links carry the most urgent transfer
      Json links = Json::array();
      for (const madpipe::schedule::LinkOrder& link : plan.step_order->per_link) {
        Json tokens = Json::array();
        for (const madpipe::schedule::StepAction& action : link.transfers)
          tokens.push_back(madpipe::schedule::to_string(action));
        Json entry = Json::object();
        entry["link"] = Json::array({link.link.a, link.link.b});
        entry["order"] = std::move(tokens);
        links.push_back(std::move(entry));
      }
      order["links"] = std::move(links);
    }
    j["step_order"] = std::move(order);
  }

  Json predicted = Json::object();
  predicted["period_ms"] = plan.predicted.period_ms;
  predicted["throughput_per_s"] = plan.predicted.throughput_per_s;
  predicted["lower_bound_period_ms"] = plan.predicted.lower_bound_period_ms;
  Json memory = Json::array();
  for (std::int64_t bytes : plan.predicted.memory_bytes) memory.push_back(bytes);
  predicted["memory_bytes"] = std::move(memory);
  if (plan.predicted.tied_exchange_ms > 0) {  // absent: no tied weight apart, as before
    predicted["tied_exchange_ms"] = plan.predicted.tied_exchange_ms;
    predicted["micro_batches_per_step"] = plan.predicted.micro_batches_per_step;
  }
  if (plan.predicted.time) {
    const madpipe::plan::TimeBreakdown& time = *plan.predicted.time;
    Json breakdown = Json::object();
    breakdown["useful"] = time.useful;
    breakdown["recomputation"] = time.recomputation;
    breakdown["imbalance"] = time.imbalance;
    breakdown["tied_exchange"] = time.tied_exchange;
    breakdown["waiting"] = time.waiting;
    breakdown["busy"] = time.busy;
    predicted["time"] = std::move(breakdown);
  }
  if (plan.predicted.step) {
    Json step = Json::object();
    step["micro_batches"] = plan.predicted.step->micro_batches;
    step["time_ms"] = plan.predicted.step->time_ms;
    step["bubble"] = plan.predicted.step->bubble;
    predicted["step"] = std::move(step);
  }
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

static std::string plan_text(const madpipe::plan::Plan& plan) {
  std::string out;
  print_pretty(plan_json<ordered_json>(plan), 0, out);
  out += '\n';
  return out;
}

nlohmann::json madpipe::plan::plan_to_json(const Plan& plan) { return plan_json<json>(plan); }

void madpipe::plan::write_plan(const Plan& plan, std::ostream& out) {
  out << plan_text(plan);
  if (!out) throw Error(ErrorKind::Io, "", "", "cannot write plan to stream");
}

void madpipe::plan::write_plan(const Plan& plan, const std::string& path) {
  const std::string text = plan_text(plan);
  write_file_atomically(path, text);
}

// ---------------------------------------------------------------------------------------------
// Reading

using madpipe::JsonReader;
using Sign = madpipe::JsonReader::Sign;

// The plan reader writes NaN as "NaN", cuts a long value to 60 characters with the "..."
// included, and still reads an integral 9.2e18 as an integer.
static madpipe::JsonReaderStyle plan_style() {
  madpipe::JsonReaderStyle style;
  style.nan = "NaN";
  style.cut_to = 57;
  style.max_integral_float = 9.2e18;
  return style;
}

// Optional {"strategy": "..."} object; "none" when absent.
// A stage's {"strategy": NAME} member `key` (absent: the table's first value, none); a name
// outside `table` fails naming <pointer>/<key>/strategy and the valid names.
template <typename Enum, std::size_t N>
static Enum strategy_member(const JsonReader& reader, const json& object, const char* key,
                            const std::string& pointer, const madpipe::Named<Enum> (&table)[N]) {
  const json* value = JsonReader::find(object, key);
  if (value == nullptr) return table[0].value;
  const std::string here = pointer + "/" + key;
  const std::string name =
      reader.string_member(reader.object_value(*value, here), here, "strategy");
  for (const madpipe::Named<Enum>& entry : table)
    if (name == entry.name) return entry.value;
  std::string valid;
  for (std::size_t i = 0; i < N; ++i)
    valid += std::string(i == 0 ? "" : i + 1 == N ? " or " : ", ") + "\"" + table[i].name + "\"";
  reader.fail(here + "/strategy", "must be " + valid + ", got \"" + name + "\"");
}

static madpipe::Platform read_platform(const JsonReader& reader, const json& j) {
  const std::string p = "/platform";
  const json& o = reader.object_member(j, "", "platform");
  madpipe::Platform platform;
  platform.gpus = reader.int_member(o, p, "gpus", 1);
  platform.memory_bytes = reader.int64_member(o, p, "memory_bytes", 1);
  platform.bandwidth_bytes_per_ms =
      reader.number_member(o, p, "bandwidth_bytes_per_ms", Sign::Positive);
  platform.weight_copies = reader.int_member(o, p, "weight_copies", 1);
  if (o.contains("host_bandwidth_bytes_per_ms"))
    platform.host_bandwidth_bytes_per_ms =
        reader.number_member(o, p, "host_bandwidth_bytes_per_ms", Sign::Positive);
  // Multi-node platforms; 0 (or absent): one node, and the same bandwidth between nodes.
  if (o.contains("gpus_per_node"))
    platform.gpus_per_node = reader.int_member(o, p, "gpus_per_node", 0);
  if (o.contains("inter_node_bandwidth_bytes_per_ms"))
    platform.inter_node_bandwidth_bytes_per_ms =
        reader.number_member(o, p, "inter_node_bandwidth_bytes_per_ms", Sign::NonNegative);
  return platform;
}

static madpipe::schedule::Stage read_stage(const JsonReader& reader, const json& value,
                                           const std::string& p) {
  const json& o = reader.object_value(value, p);
  madpipe::schedule::Stage stage;
  stage.id = reader.int_member(o, p, "id", 0);
  stage.first_layer = reader.int_member(o, p, "first_layer", 0);
  stage.last_layer = reader.int_member(o, p, "last_layer", 0);
  stage.gpu = reader.int_member(o, p, "gpu", 0);
  stage.forward_ms = reader.number_member(o, p, "forward_ms", Sign::NonNegative);
  stage.backward_ms = reader.number_member(o, p, "backward_ms", Sign::NonNegative);
  if (o.contains("backward_weight_ms") || o.contains("weight_kept_bytes")) {
    stage.backward_weight_ms = reader.number_member(o, p, "backward_weight_ms", Sign::Positive);
    stage.weight_kept_bytes = reader.int64_member(o, p, "weight_kept_bytes", 0);
    if (stage.backward_weight_ms > stage.backward_ms)
      reader.fail(p + "/backward_weight_ms", "must be <= backward_ms (" +
                                                 reader.show(o.at("backward_ms")) + "), got " +
                                                 reader.show(o.at("backward_weight_ms")));
  }
  stage.weight_bytes = reader.int64_member(o, p, "weight_bytes", 0);
  stage.stored_bytes = reader.int64_member(o, p, "stored_bytes", 0);
  stage.output_bytes = reader.int64_member(o, p, "output_bytes", 0);
  if (o.contains("workspace_bytes"))
    stage.workspace_bytes = reader.int64_member(o, p, "workspace_bytes", 0);
  stage.remat = strategy_member(reader, o, "remat", p, madpipe::schedule::kRematStrategyNames);
  stage.offload =
      strategy_member(reader, o, "offload", p, madpipe::schedule::kOffloadStrategyNames);
  if (o.contains("sequence")) stage.sequence = reader.string_member(o, p, "sequence");
  if (o.contains("shared_weights")) {
    const json& shared = reader.array_member(o, p, "shared_weights");
    for (std::size_t i = 0; i < shared.size(); ++i) {
      const std::string at = p + "/shared_weights/" + std::to_string(i);
      const json& entry = reader.object_value(shared[i], at);
      stage.shared_weights.push_back(madpipe::schedule::SharedWeight{
          reader.int_member(entry, at, "group", 0), reader.int64_member(entry, at, "bytes", 1)});
    }
  }
  return stage;
}

static madpipe::schedule::Op read_op(const JsonReader& reader, const json& value,
                                     const std::string& p) {
  using madpipe::schedule::OpKind;
  const json& o = reader.object_value(value, p);
  madpipe::schedule::Op op;
  const std::string kind = reader.string_member(o, p, "kind");
  try {
    op.kind = madpipe::schedule::op_kind_from_string(kind);
  } catch (const madpipe::Error& e) {
    reader.fail(p + "/kind", e.problem());
  }
  op.stage = reader.int_member(o, p, "stage", 0);
  if (madpipe::schedule::is_transfer(op.kind)) {
    const json& link = reader.array_member(o, p, "link");
    if (link.size() != 2)
      reader.fail(p + "/link", "must be an array of two gpu indices, got " + reader.show(link));
    op.link.a = static_cast<int>(
        reader.integer_value(link[0], 0, INT_MAX, "an integer >= 0", p + "/link/0"));
    op.link.b = static_cast<int>(
        reader.integer_value(link[1], 0, INT_MAX, "an integer >= 0", p + "/link/1"));
  } else {
    op.gpu = reader.int_member(o, p, "gpu", 0);
  }
  op.start_ms = reader.number_member(o, p, "start_ms", Sign::NonNegative);
  op.duration_ms = reader.number_member(o, p, "duration_ms", Sign::NonNegative);
  op.shift = static_cast<int>(reader.integer_value(reader.require(o, p, "shift"), INT_MIN, INT_MAX,
                                                   "an integer", p + "/shift"));
  return op;
}

static madpipe::schedule::Pattern read_pattern(const JsonReader& reader, const json& j) {
  const std::string p = "/pattern";
  const json& o = reader.object_member(j, "", "pattern");
  madpipe::schedule::Pattern pattern;
  pattern.period_ms = reader.number_member(o, p, "period_ms", Sign::Positive);
  pattern.k = reader.int_member(o, p, "k", 1);
  const json& ops = reader.array_member(o, p, "ops");
  for (std::size_t i = 0; i < ops.size(); ++i)
    pattern.ops.push_back(read_op(reader, ops[i], p + "/ops/" + std::to_string(i)));
  return pattern;
}

// An array of op tokens ("F2.7", "SEND_ACT1.0") at pointer `q`.
static std::vector<madpipe::schedule::StepAction> read_step_actions(const JsonReader& reader,
                                                                    const json& list,
                                                                    const std::string& q) {
  if (!list.is_array())
    reader.fail(q, "must be an array of ops such as \"F2.7\", got " + reader.show(list));
  std::vector<madpipe::schedule::StepAction> actions;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string r = q + "/" + std::to_string(i);
    if (!list[i].is_string())
      reader.fail(r, "must be an op such as \"F2.7\", got " + reader.show(list[i]));
    try {
      actions.push_back(madpipe::schedule::parse_step_action(list[i].get<std::string>(), r));
    } catch (const madpipe::Error& e) {
      reader.fail(r, e.problem());
    }
  }
  return actions;
}

static madpipe::schedule::StepOrder read_step_order(const JsonReader& reader, const json& value) {
  const std::string p = "/step_order";
  const json& o = reader.object_value(value, p);
  madpipe::schedule::StepOrder order;
  order.micro_batches = reader.int_member(o, p, "micro_batches", 1);
  const json& gpus = reader.array_member(o, p, "gpus");
  for (std::size_t g = 0; g < gpus.size(); ++g)
    order.per_gpu.push_back(read_step_actions(reader, gpus[g], p + "/gpus/" + std::to_string(g)));
  const json* links = JsonReader::find(o, "links");
  if (links == nullptr) return order;
  if (!links->is_array()) reader.fail(p + "/links", "must be an array, got " + reader.show(*links));
  for (std::size_t l = 0; l < links->size(); ++l) {
    const std::string q = p + "/links/" + std::to_string(l);
    const json& entry = reader.object_value((*links)[l], q);
    const json& link = reader.array_member(entry, q, "link");
    if (link.size() != 2)
      reader.fail(q + "/link", "must be an array of two gpu indices, got " + reader.show(link));
    madpipe::schedule::LinkOrder read;
    read.link.a = static_cast<int>(
        reader.integer_value(link[0], 0, INT_MAX, "an integer >= 0", q + "/link/0"));
    read.link.b = static_cast<int>(
        reader.integer_value(link[1], 0, INT_MAX, "an integer >= 0", q + "/link/1"));
    read.transfers = read_step_actions(reader, reader.require(entry, q, "order"), q + "/order");
    order.per_link.push_back(std::move(read));
  }
  return order;
}

static madpipe::plan::Predicted read_predicted(const JsonReader& reader, const json& j) {
  const std::string p = "/predicted";
  const json& o = reader.object_member(j, "", "predicted");
  madpipe::plan::Predicted predicted;
  predicted.period_ms = reader.number_member(o, p, "period_ms", Sign::NonNegative);
  predicted.throughput_per_s = reader.number_member(o, p, "throughput_per_s", Sign::NonNegative);
  predicted.lower_bound_period_ms =
      reader.number_member(o, p, "lower_bound_period_ms", Sign::NonNegative);
  const json& memory = reader.array_member(o, p, "memory_bytes");
  for (std::size_t g = 0; g < memory.size(); ++g)
    predicted.memory_bytes.push_back(
        reader.int64_value(memory[g], p + "/memory_bytes/" + std::to_string(g), 0));
  if (o.contains("tied_exchange_ms") || o.contains("micro_batches_per_step")) {
    predicted.tied_exchange_ms = reader.number_member(o, p, "tied_exchange_ms", Sign::Positive);
    predicted.micro_batches_per_step = reader.int_member(o, p, "micro_batches_per_step", 1);
  }
  if (o.contains("time")) {
    const std::string t = p + "/time";
    const json& time = reader.object_member(o, p, "time");
    const auto fraction = [&](const char* key) {
      return reader.number_member(time, t, key, Sign::NonNegative);
    };
    madpipe::plan::TimeBreakdown breakdown;
    breakdown.useful = fraction("useful");
    breakdown.recomputation = fraction("recomputation");
    breakdown.imbalance = fraction("imbalance");
    breakdown.tied_exchange = fraction("tied_exchange");
    breakdown.waiting = fraction("waiting");
    const json& busy = reader.array_member(time, t, "busy");
    for (std::size_t g = 0; g < busy.size(); ++g)
      breakdown.busy.push_back(
          reader.number_value(busy[g], t + "/busy/" + std::to_string(g), Sign::NonNegative));
    predicted.time = breakdown;
  }
  if (o.contains("step")) {
    const std::string t = p + "/step";
    const json& step = reader.object_member(o, p, "step");
    madpipe::plan::StepPrediction read;
    read.micro_batches = reader.int_member(step, t, "micro_batches", 1);
    read.time_ms = reader.number_member(step, t, "time_ms", Sign::NonNegative);
    read.bubble = reader.number_member(step, t, "bubble", Sign::NonNegative);
    predicted.step = read;
  }
  return predicted;
}

static madpipe::plan::SolverInfo read_solver(const JsonReader& reader, const json& value) {
  const std::string p = "/solver";
  const json& o = reader.object_value(value, p);
  madpipe::plan::SolverInfo solver;
  solver.backend = reader.string_member(o, p, "backend");
  solver.status = reader.string_member(o, p, "status");
  static const char* const kStatuses[] = {"optimal", "feasible", "infeasible", "timeout", "error"};
  bool known = false;
  for (const char* status : kStatuses) known = known || solver.status == status;
  if (!known)
    reader.fail(p + "/status", "unknown solver status '" + solver.status +
                                   "' (valid: optimal, feasible, infeasible, timeout, error)");
  solver.objective = reader.number_member(o, p, "objective", Sign::Any);
  solver.bound = reader.number_member(o, p, "bound", Sign::Any);
  solver.gap = reader.number_member(o, p, "gap", Sign::Any);
  solver.seconds = reader.number_member(o, p, "seconds", Sign::NonNegative);
  return solver;
}

madpipe::plan::Plan madpipe::plan::plan_from_json(const nlohmann::json& j,
                                                  const std::string& file) {
  const JsonReader reader{file, plan_style()};
  reader.require_document(j);
  const std::string format = reader.string_member(j, "", "format");
  if (format != kPlanFormat)
    reader.fail("/format", std::string("must be \"") + kPlanFormat + "\", got \"" + format + "\"");
  Plan plan;
  plan.profile = reader.string_member(j, "", "profile");
  plan.platform = read_platform(reader, j);
  if (j.contains("replicas")) {
    plan.replicas = reader.int_member(j, "", "replicas", 1);
    if (static_cast<std::int64_t>(plan.replicas) * plan.platform.gpus > INT_MAX)
      reader.fail("/replicas",
                  "replicas x platform gpus must be at most " + std::to_string(INT_MAX) + ", got " +
                      std::to_string(plan.replicas) + " x " + std::to_string(plan.platform.gpus));
  }
  plan.algorithm = reader.string_member(j, "", "algorithm");
  const json& stages = reader.array_member(j, "", "stages");
  for (std::size_t s = 0; s < stages.size(); ++s)
    plan.stages.push_back(read_stage(reader, stages[s], "/stages/" + std::to_string(s)));
  plan.pattern = read_pattern(reader, j);
  if (const json* order = JsonReader::find(j, "step_order"))
    plan.step_order = read_step_order(reader, *order);
  plan.predicted = read_predicted(reader, j);
  const json* solver = JsonReader::find(j, "solver");
  if (solver != nullptr) plan.solver = read_solver(reader, *solver);
  return plan;
}

madpipe::plan::Plan madpipe::plan::read_plan(const std::string& path) {
  return plan_from_json(read_json_file(path), path);
}

double madpipe::plan::period_with_tied_exchange_ms(const schedule::Pattern& pattern,
                                                   const std::vector<schedule::Stage>& stages,
                                                   const Platform& platform,
                                                   int micro_batches_per_step) {
  const int k = pattern.k > 0 ? pattern.k : 1;
  const double exchange = schedule::tied_exchange_ms(stages, platform);
  const int m = micro_batches_per_step > 0 ? micro_batches_per_step : platform.gpus;
  return pattern.period_ms / k + (exchange > 0 ? exchange / m : 0.0);
}

void madpipe::plan::fill_predicted(Plan& plan, double lower_bound_period_ms,
                                   int micro_batches_per_step) {
  Predicted& predicted = plan.predicted;
  predicted.tied_exchange_ms = schedule::tied_exchange_ms(plan.stages, plan.platform);
  predicted.micro_batches_per_step =
      predicted.tied_exchange_ms > 0
          ? (micro_batches_per_step > 0 ? micro_batches_per_step : plan.platform.gpus)
          : 0;
  predicted.period_ms = period_with_tied_exchange_ms(plan.pattern, plan.stages, plan.platform,
                                                     micro_batches_per_step);
  predicted.throughput_per_s = predicted.period_ms > 0 ? 1000.0 / predicted.period_ms : 0.0;
  predicted.lower_bound_period_ms = lower_bound_period_ms;
  predicted.memory_bytes = totals(evaluate_memory(plan.stages, plan.pattern, plan.platform));
}
