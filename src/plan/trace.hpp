#pragma once

#include "plan/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace madpipe::plan {

// What a training run measured (madpipe.trace/1, docs/formats.md): every executed forward and
// backward with its rank, stage, step and micro-batch, every transfer between ranks, and per-rank
// peak memory. Times are milliseconds since the run's common start (a barrier on every rank).

enum class TraceOpKind { Forward, Backward, Weight };  // F, B (or I), W

struct TraceOp {
  TraceOpKind kind = TraceOpKind::Forward;
  int rank = 0;
  int stage = 0;
  int step = 1;         // training step (1-based); 2bw: the update the micro-batch belongs to
  int micro_batch = 0;  // within the step
  double start_ms = 0;
  double end_ms = 0;
};

enum class TraceTransferKind { Activation, Gradient };

// A transfer of stage `stage`'s output (or of its gradient) from rank `from` to rank `to`: from
// the moment the sender posted it to the moment the receiver had the data in hand (an upper
// bound on its arrival).
struct TraceTransfer {
  TraceTransferKind kind = TraceTransferKind::Activation;
  int stage = 0;
  int step = 1;
  int micro_batch = 0;
  int from = 0;
  int to = 0;
  std::int64_t bytes = 0;
  double start_ms = 0;
  double end_ms = 0;
};

struct TraceRankMemory {
  int rank = 0;
  // Peak of the bytes held by tensors during the traced steps (CUDA: the caching allocator's
  // allocated-bytes peak; CPU: madpipe's counting allocator).
  std::int64_t peak_bytes = 0;
  std::int64_t peak_rss_bytes = 0;  // the process's peak resident set (0 when unknown)
  // Where the peak was reached: the instruction of the rank's program ("B 1.3"), "between
  // programs" (an optimizer step or all-reduce outside them), or "" when unknown.
  std::string peak_at;
};

struct Trace {
  std::string profile;    // plan.profile
  std::string algorithm;  // plan.algorithm
  std::string device;     // "cpu", "cuda"
  std::string mode;       // "sync" or "2bw"
  int ranks = 0;
  int micro_batches = 0;  // per step
  int steps = 0;          // steps traced
  std::vector<TraceOp> ops;
  std::vector<TraceTransfer> transfers;
  std::vector<TraceRankMemory> memory;  // one per rank, ordered by rank
  // The plan's predictions, copied so that a trace stands alone.
  double predicted_period_ms = 0;
  // One step of `micro_batches` with its fill and drain, simulated (0: not predicted, as in 2BW,
  // whose steps do not drain).
  double predicted_step_ms = 0;
  std::vector<std::int64_t> predicted_memory_bytes;  // per rank
};

inline constexpr const char* kTraceFormat = "madpipe.trace/1";

// JSON I/O of madpipe.trace/1. Readers reject a missing or mistyped field, a negative time or
// size, end < start and a rank outside [0, ranks) with Error{InvalidInput} naming the file and
// the JSON pointer; I/O failures throw Error{Io}. write_trace is atomic (temporary file + rename).
nlohmann::json trace_to_json(const Trace& trace);
Trace trace_from_json(const nlohmann::json& j, const std::string& file = "");
void write_trace(const Trace& trace, const std::string& path);
Trace read_trace(const std::string& path);

// Measured against predicted. The steady-state period is taken, for every step and stage, from
// the start times of the forwards of the middle half of the step's micro-batches (the fill and
// the drain excluded), as time per micro-batch; the median over stages and steps (the first
// step, which warms up allocators, left out when there are others).
struct TraceSummary {
  double measured_period_ms = 0;  // 0 when too few micro-batches per step to tell
  double predicted_period_ms = 0;
  double period_ratio = 0;  // measured / predicted (0 when either is 0)
  double step_ms = 0;       // median step time: first op start to last op end of a step
  double predicted_step_ms = 0;
  double step_ratio = 0;                      // step_ms / predicted_step_ms (0 when either is 0)
  std::vector<std::int64_t> peak_bytes;       // per rank
  std::vector<std::string> peak_at;           // per rank (TraceRankMemory::peak_at)
  std::vector<std::int64_t> predicted_bytes;  // per rank
  std::vector<double> memory_ratio;           // per rank, measured / predicted
  std::vector<double> busy_fraction;          // per rank: compute time / traced time
};

TraceSummary summarize(const Trace& trace);

// Human-readable lines of a summary, for the trainer and `madpipe show`.
std::string format_summary(const TraceSummary& summary);

}  // namespace madpipe::plan
