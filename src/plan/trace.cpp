#include "plan/trace.hpp"

#include "core/error.hpp"
#include "core/json_file.hpp"
#include "core/json_reader.hpp"
#include "core/units.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

using nlohmann::json;
using nlohmann::ordered_json;

namespace mplan = madpipe::plan;

// ---------------------------------------------------------------------------------------------
// Summary

static double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

static double ratio(double measured, double predicted) {
  return measured > 0 && predicted > 0 ? measured / predicted : 0.0;
}

// The steps the steady-state figures come from: all the traced ones but the first, which warms
// up allocators, when there are others.
static std::set<int> measured_steps(const mplan::Trace& trace) {
  std::set<int> steps;
  for (const mplan::TraceOp& op : trace.ops) steps.insert(op.step);
  if (steps.size() > 1) steps.erase(steps.begin());
  return steps;
}

// Time per micro-batch between the forwards of micro-batches N/4 and N-1-N/4 of each stage of
// `step`, the median over stages; 0 when no stage has both.
static double step_period_ms(const mplan::Trace& trace, int step) {
  const int lo = trace.micro_batches / 4;
  const int hi = trace.micro_batches - 1 - trace.micro_batches / 4;
  if (hi <= lo) return 0;
  std::map<int, std::pair<double, double>> starts;  // stage -> start of F(lo), start of F(hi)
  const double unset = std::numeric_limits<double>::infinity();
  for (const mplan::TraceOp& op : trace.ops) {
    if (op.step != step || op.kind != mplan::TraceOpKind::Forward) continue;
    if (op.micro_batch != lo && op.micro_batch != hi) continue;
    auto& pair = starts.try_emplace(op.stage, unset, unset).first->second;
    double& start = op.micro_batch == lo ? pair.first : pair.second;
    start = std::min(start, op.start_ms);  // the first forward when a stage recomputes
  }
  std::vector<double> periods;
  for (const auto& [stage, pair] : starts)
    if (pair.first != unset && pair.second != unset)
      periods.push_back((pair.second - pair.first) / (hi - lo));
  return median(periods);
}

static double step_span_ms(const mplan::Trace& trace, int step) {
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  for (const mplan::TraceOp& op : trace.ops) {
    if (op.step != step) continue;
    first = std::min(first, op.start_ms);
    last = std::max(last, op.end_ms);
  }
  return last >= first ? last - first : 0.0;
}

static std::vector<double> busy_fractions(const mplan::Trace& trace) {
  std::vector<double> busy(static_cast<std::size_t>(std::max(trace.ranks, 0)), 0.0);
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  for (const mplan::TraceOp& op : trace.ops) {
    first = std::min(first, op.start_ms);
    last = std::max(last, op.end_ms);
    if (op.rank >= 0 && op.rank < trace.ranks) busy[op.rank] += op.end_ms - op.start_ms;
  }
  const double span = last - first;
  for (double& fraction : busy) fraction = span > 0 ? fraction / span : 0.0;
  return busy;
}

mplan::TraceSummary mplan::summarize(const Trace& trace) {
  TraceSummary summary;
  std::vector<double> periods;
  std::vector<double> spans;
  for (int step : measured_steps(trace)) {
    const double period = step_period_ms(trace, step);
    if (period > 0) periods.push_back(period);
    spans.push_back(step_span_ms(trace, step));
  }
  summary.measured_period_ms = median(periods);
  summary.predicted_period_ms = trace.predicted_period_ms;
  summary.period_ratio = ratio(summary.measured_period_ms, summary.predicted_period_ms);
  summary.step_ms = median(spans);
  summary.predicted_step_ms = trace.predicted_step_ms;
  summary.step_ratio = ratio(summary.step_ms, summary.predicted_step_ms);

  const auto ranks = static_cast<std::size_t>(std::max(trace.ranks, 0));
  summary.peak_bytes.assign(ranks, 0);
  summary.peak_at.assign(ranks, "");
  summary.predicted_bytes.assign(ranks, 0);
  for (const TraceRankMemory& memory : trace.memory)
    if (memory.rank >= 0 && static_cast<std::size_t>(memory.rank) < ranks) {
      summary.peak_bytes[memory.rank] = memory.peak_bytes;
      summary.peak_at[memory.rank] = memory.peak_at;
    }
  for (std::size_t r = 0; r < ranks && r < trace.predicted_memory_bytes.size(); ++r)
    summary.predicted_bytes[r] = trace.predicted_memory_bytes[r];
  for (std::size_t r = 0; r < ranks; ++r) {
    summary.memory_ratio.push_back(ratio(static_cast<double>(summary.peak_bytes[r]),
                                         static_cast<double>(summary.predicted_bytes[r])));
  }
  summary.busy_fraction = busy_fractions(trace);
  return summary;
}

static std::string printf_number(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string mplan::format_summary(const TraceSummary& summary) {
  std::string out = "measured period ";
  if (summary.measured_period_ms > 0) {
    out += format_ms(summary.measured_period_ms) + " per micro-batch";
  } else {
    out += "not measured (too few micro-batches per step)";
  }
  if (summary.predicted_period_ms > 0) {
    out += ", predicted " + format_ms(summary.predicted_period_ms);
    if (summary.period_ratio > 0)
      out += " (ratio " + printf_number("%.2f", summary.period_ratio) + ")";
  }
  out += "; step " + format_ms(summary.step_ms);
  if (summary.predicted_step_ms > 0) {
    out += ", predicted " + format_ms(summary.predicted_step_ms);
    if (summary.step_ratio > 0) out += " (ratio " + printf_number("%.2f", summary.step_ratio) + ")";
  }
  out += "\n";
  for (std::size_t r = 0; r < summary.peak_bytes.size(); ++r) {
    out += "rank " + std::to_string(r) + ": peak " +
           format_bytes(static_cast<double>(summary.peak_bytes[r]));
    if (r < summary.peak_at.size() && !summary.peak_at[r].empty())
      out += " (at " + summary.peak_at[r] + ")";
    const std::int64_t predicted =
        r < summary.predicted_bytes.size() ? summary.predicted_bytes[r] : 0;
    if (predicted > 0) {
      out += ", predicted " + format_bytes(static_cast<double>(predicted));
      if (r < summary.memory_ratio.size() && summary.memory_ratio[r] > 0)
        out += " (ratio " + printf_number("%.2f", summary.memory_ratio[r]) + ")";
    }
    if (r < summary.busy_fraction.size())
      out += ", busy " + printf_number("%.0f", 100.0 * summary.busy_fraction[r]) + "%";
    out += "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

static const char* kind_name(mplan::TraceOpKind kind) {
  switch (kind) {
    case mplan::TraceOpKind::Forward:
      return "F";
    case mplan::TraceOpKind::Backward:
      return "B";
    case mplan::TraceOpKind::Weight:
      return "W";
  }
  MADPIPE_UNREACHABLE("unknown trace op kind");
}

static const char* kind_name(mplan::TraceTransferKind kind) {
  switch (kind) {
    case mplan::TraceTransferKind::Activation:
      return "activation";
    case mplan::TraceTransferKind::Gradient:
      return "gradient";
  }
  MADPIPE_UNREACHABLE("unknown trace transfer kind");
}

template <class Json>
static Json summary_json(const mplan::Trace& trace) {
  const mplan::TraceSummary summary = mplan::summarize(trace);
  Json out = Json::object();
  out["measured_period_ms"] = summary.measured_period_ms;
  out["period_ratio"] = summary.period_ratio;
  out["step_ms"] = summary.step_ms;
  out["step_ratio"] = summary.step_ratio;
  out["peak_bytes"] = summary.peak_bytes;
  out["memory_ratio"] = summary.memory_ratio;
  out["busy_fraction"] = summary.busy_fraction;
  return out;
}

// Builds the trace in the key order of docs/formats.md (kept by ordered_json; nlohmann::json,
// what trace_to_json returns, sorts the keys, which is still a fixed order).
template <class Json>
static Json trace_json(const mplan::Trace& trace) {
  Json j = Json::object();
  j["format"] = mplan::kTraceFormat;
  j["profile"] = trace.profile;
  j["algorithm"] = trace.algorithm;
  j["device"] = trace.device;
  j["mode"] = trace.mode;
  j["ranks"] = trace.ranks;
  j["micro_batches"] = trace.micro_batches;
  j["steps"] = trace.steps;
  Json predicted = Json::object();
  predicted["period_ms"] = trace.predicted_period_ms;
  if (trace.predicted_step_ms > 0) predicted["step_ms"] = trace.predicted_step_ms;
  predicted["memory_bytes"] = trace.predicted_memory_bytes;
  j["predicted"] = std::move(predicted);
  j["summary"] = summary_json<Json>(trace);

  Json memory = Json::array();
  for (const mplan::TraceRankMemory& rank : trace.memory) {
    Json m = Json::object();
    m["rank"] = rank.rank;
    m["peak_bytes"] = rank.peak_bytes;
    m["peak_rss_bytes"] = rank.peak_rss_bytes;
    if (!rank.peak_at.empty()) m["peak_at"] = rank.peak_at;
    memory.push_back(std::move(m));
  }
  j["memory"] = std::move(memory);

  Json ops = Json::array();
  for (const mplan::TraceOp& op : trace.ops) {
    Json o = Json::object();
    o["rank"] = op.rank;
    o["kind"] = kind_name(op.kind);
    o["stage"] = op.stage;
    o["step"] = op.step;
    o["micro_batch"] = op.micro_batch;
    o["start_ms"] = op.start_ms;
    o["end_ms"] = op.end_ms;
    ops.push_back(std::move(o));
  }
  j["ops"] = std::move(ops);

  Json transfers = Json::array();
  for (const mplan::TraceTransfer& transfer : trace.transfers) {
    Json t = Json::object();
    t["kind"] = kind_name(transfer.kind);
    t["stage"] = transfer.stage;
    t["step"] = transfer.step;
    t["micro_batch"] = transfer.micro_batch;
    t["from"] = transfer.from;
    t["to"] = transfer.to;
    t["bytes"] = transfer.bytes;
    t["start_ms"] = transfer.start_ms;
    t["end_ms"] = transfer.end_ms;
    transfers.push_back(std::move(t));
  }
  j["transfers"] = std::move(transfers);
  return j;
}

static void print_inline(const ordered_json& j, std::string& out) {
  if (!j.is_structured()) {
    out += j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    return;
  }
  const bool object = j.is_object();
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    if (object) {
      print_inline(ordered_json(it.key()), out);
      out += ": ";
    }
    print_inline(it.value(), out);
  }
  out += object ? '}' : ']';
}

// One top-level member a line, and one element a line in the memory, op and transfer lists.
static std::string trace_text(const mplan::Trace& trace) {
  const ordered_json j = trace_json<ordered_json>(trace);
  std::string out = "{\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += "  ";
    print_inline(ordered_json(it.key()), out);
    out += ": ";
    const ordered_json& value = it.value();
    if (!value.is_array() || value.empty() || !value.front().is_object()) {
      print_inline(value, out);
      continue;
    }
    out += "[\n";
    for (std::size_t i = 0; i < value.size(); ++i) {
      out += "    ";
      print_inline(value[i], out);
      out += i + 1 < value.size() ? ",\n" : "\n";
    }
    out += "  ]";
  }
  out += "\n}\n";
  return out;
}

json mplan::trace_to_json(const Trace& trace) { return trace_json<json>(trace); }

void mplan::write_trace(const Trace& trace, const std::string& path) {
  trace_from_json(trace_to_json(trace), path);  // refuse to write what read_trace would reject
  const std::string text = trace_text(trace);
  write_file_atomically(path, text);
}

// ---------------------------------------------------------------------------------------------
// Reading

using madpipe::JsonReader;

static double time_member(const JsonReader& reader, const json& object, const std::string& pointer,
                          const char* key) {
  return reader.number_member(object, pointer, key, JsonReader::Sign::NonNegative);
}

static int rank_member(const JsonReader& reader, const json& object, const std::string& pointer,
                       const char* key, int ranks) {
  return static_cast<int>(reader.integer_value(reader.require(object, pointer, key), 0, ranks - 1,
                                               "a rank in [0, " + std::to_string(ranks) + ")",
                                               pointer + "/" + key));
}

static int micro_batch_member(const JsonReader& reader, const json& object,
                              const std::string& pointer, int micro_batches) {
  return static_cast<int>(
      reader.integer_value(reader.require(object, pointer, "micro_batch"), 0, micro_batches - 1,
                           "in [0, " + std::to_string(micro_batches) + ") (micro_batches per step)",
                           pointer + "/micro_batch"));
}

// start_ms and end_ms, with end_ms >= start_ms.
static std::pair<double, double> interval(const JsonReader& reader, const json& object,
                                          const std::string& pointer) {
  const double start = time_member(reader, object, pointer, "start_ms");
  const double end = time_member(reader, object, pointer, "end_ms");
  if (end < start) {
    reader.fail(pointer + "/end_ms", "must be >= start_ms (" + reader.show(json(start)) +
                                         "), got " + reader.show(json(end)));
  }
  return {start, end};
}

static mplan::TraceOpKind op_kind(const JsonReader& reader, const json& object,
                                  const std::string& pointer) {
  const std::string kind = reader.string_member(object, pointer, "kind");
  if (kind == "F") return mplan::TraceOpKind::Forward;
  if (kind == "B") return mplan::TraceOpKind::Backward;
  if (kind == "W") return mplan::TraceOpKind::Weight;
  reader.fail(pointer + "/kind", "unknown op kind '" + kind + "' (valid: F, B, W)");
}

static mplan::TraceTransferKind transfer_kind(const JsonReader& reader, const json& object,
                                              const std::string& pointer) {
  const std::string kind = reader.string_member(object, pointer, "kind");
  if (kind == "activation") return mplan::TraceTransferKind::Activation;
  if (kind == "gradient") return mplan::TraceTransferKind::Gradient;
  reader.fail(pointer + "/kind",
              "unknown transfer kind '" + kind + "' (valid: activation, gradient)");
}

static mplan::TraceOp read_op(const JsonReader& reader, const json& value,
                              const std::string& pointer, const mplan::Trace& trace) {
  const json& o = reader.object_value(value, pointer);
  mplan::TraceOp op;
  op.rank = rank_member(reader, o, pointer, "rank", trace.ranks);
  op.kind = op_kind(reader, o, pointer);
  op.stage = reader.int_member(o, pointer, "stage", 0);
  op.step = reader.int_member(o, pointer, "step", 1);
  op.micro_batch = micro_batch_member(reader, o, pointer, trace.micro_batches);
  std::tie(op.start_ms, op.end_ms) = interval(reader, o, pointer);
  return op;
}

static mplan::TraceTransfer read_transfer(const JsonReader& reader, const json& value,
                                          const std::string& pointer, const mplan::Trace& trace) {
  const json& o = reader.object_value(value, pointer);
  mplan::TraceTransfer transfer;
  transfer.kind = transfer_kind(reader, o, pointer);
  transfer.stage = reader.int_member(o, pointer, "stage", 0);
  transfer.step = reader.int_member(o, pointer, "step", 1);
  transfer.micro_batch = micro_batch_member(reader, o, pointer, trace.micro_batches);
  transfer.from = rank_member(reader, o, pointer, "from", trace.ranks);
  transfer.to = rank_member(reader, o, pointer, "to", trace.ranks);
  transfer.bytes = reader.int64_member(o, pointer, "bytes", 0);
  std::tie(transfer.start_ms, transfer.end_ms) = interval(reader, o, pointer);
  return transfer;
}

// One entry per rank, in rank order.
static mplan::TraceRankMemory read_memory(const JsonReader& reader, const json& value,
                                          const std::string& pointer, int index) {
  const json& o = reader.object_value(value, pointer);
  mplan::TraceRankMemory memory;
  memory.rank = static_cast<int>(reader.integer_value(
      reader.require(o, pointer, "rank"), index, index,
      std::to_string(index) + " (one entry per rank, in order)", pointer + "/rank"));
  memory.peak_bytes = reader.int64_member(o, pointer, "peak_bytes", 0);
  memory.peak_rss_bytes = reader.int64_member(o, pointer, "peak_rss_bytes", 0);
  if (o.contains("peak_at")) memory.peak_at = reader.string_member(o, pointer, "peak_at");
  return memory;
}

static void read_predicted(const JsonReader& reader, const json& j, mplan::Trace& trace) {
  const std::string pointer = "/predicted";
  const json& o = reader.object_member(j, "", "predicted");
  trace.predicted_period_ms = time_member(reader, o, pointer, "period_ms");
  if (o.contains("step_ms")) trace.predicted_step_ms = time_member(reader, o, pointer, "step_ms");
  const json& memory = reader.array_member(o, pointer, "memory_bytes");
  if (memory.size() != static_cast<std::size_t>(trace.ranks)) {
    reader.fail(pointer + "/memory_bytes", "must have one entry per rank (" +
                                               std::to_string(trace.ranks) + "), got " +
                                               std::to_string(memory.size()));
  }
  for (std::size_t r = 0; r < memory.size(); ++r) {
    trace.predicted_memory_bytes.push_back(
        reader.int64_value(memory[r], pointer + "/memory_bytes/" + std::to_string(r), 0));
  }
}

mplan::Trace mplan::trace_from_json(const json& j, const std::string& file) {
  const JsonReader reader{file, {}};
  reader.require_document(j);
  reader.require_format(j, kTraceFormat);
  Trace trace;
  trace.profile = reader.string_member(j, "", "profile");
  trace.algorithm = reader.string_member(j, "", "algorithm");
  trace.device = reader.string_member(j, "", "device");
  trace.mode = reader.string_member(j, "", "mode");
  trace.ranks = reader.int_member(j, "", "ranks", 1);
  trace.micro_batches = reader.int_member(j, "", "micro_batches", 1);
  trace.steps = reader.int_member(j, "", "steps", 1);
  read_predicted(reader, j, trace);

  const json& memory = reader.array_member(j, "", "memory");
  if (memory.size() != static_cast<std::size_t>(trace.ranks)) {
    reader.fail("/memory", "must have one entry per rank (" + std::to_string(trace.ranks) +
                               "), got " + std::to_string(memory.size()));
  }
  for (std::size_t r = 0; r < memory.size(); ++r) {
    trace.memory.push_back(
        read_memory(reader, memory[r], "/memory/" + std::to_string(r), static_cast<int>(r)));
  }
  const json& ops = reader.array_member(j, "", "ops");
  trace.ops.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i)
    trace.ops.push_back(read_op(reader, ops[i], "/ops/" + std::to_string(i), trace));
  const json& transfers = reader.array_member(j, "", "transfers");
  trace.transfers.reserve(transfers.size());
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    trace.transfers.push_back(
        read_transfer(reader, transfers[i], "/transfers/" + std::to_string(i), trace));
  }
  return trace;
}

mplan::Trace mplan::read_trace(const std::string& path) {
  return trace_from_json(read_json_file(path), path);
}
