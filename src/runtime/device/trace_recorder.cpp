#include "runtime/device/trace_recorder.hpp"

#include <map>
#include <tuple>

#include <mpi.h>
#include <nlohmann/json.hpp>

madpipe::runtime::TraceRecorder::TraceRecorder(int rank)
    : rank_(rank), origin_(std::chrono::steady_clock::now()) {}

double madpipe::runtime::TraceRecorder::now_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - origin_)
      .count();
}

std::pair<int, int> madpipe::runtime::TraceRecorder::step_and_micro_batch(
    int micro_batch) const noexcept {
  if (per_step_ > 0) return {micro_batch / per_step_ + 1, micro_batch % per_step_};
  return {step_, micro_batch};
}

void madpipe::runtime::TraceRecorder::op(plan::TraceOpKind kind, int stage, int micro_batch,
                                         double start_ms, double end_ms) {
  if (!recording_) return;
  const auto [step, i] = step_and_micro_batch(micro_batch);
  if (step > last_step_) return;
  ops_.push_back({kind, rank_, stage, step, i, start_ms, end_ms});
}

void madpipe::runtime::TraceRecorder::sent(plan::TraceTransferKind kind, int stage, int micro_batch,
                                           int to, std::int64_t bytes, double posted_ms) {
  if (!recording_) return;
  const auto [step, i] = step_and_micro_batch(micro_batch);
  if (step > last_step_) return;
  sent_.push_back({kind, stage, step, i, rank_, to, bytes, posted_ms, posted_ms});
}

void madpipe::runtime::TraceRecorder::received(plan::TraceTransferKind kind, int stage,
                                               int micro_batch, int from, double done_ms) {
  if (!recording_) return;
  const auto [step, i] = step_and_micro_batch(micro_batch);
  if (step > last_step_) return;
  received_.push_back({kind, stage, step, i, from, done_ms});
}

namespace {
using madpipe::plan::TraceTransferKind;

// One rank's records as compact JSON arrays (numbers only) for the gather.
nlohmann::json records_of(const std::vector<madpipe::plan::TraceOp>& ops,
                          const std::vector<madpipe::plan::TraceTransfer>& sent,
                          const nlohmann::json& received,
                          const madpipe::plan::TraceRankMemory& memory) {
  nlohmann::json j;
  j["ops"] = nlohmann::json::array();
  for (const auto& op : ops)
    j["ops"].push_back(
        {static_cast<int>(op.kind), op.stage, op.step, op.micro_batch, op.start_ms, op.end_ms});
  j["sent"] = nlohmann::json::array();
  for (const auto& t : sent)
    j["sent"].push_back(
        {static_cast<int>(t.kind), t.stage, t.step, t.micro_batch, t.to, t.bytes, t.start_ms});
  j["received"] = received;
  j["peak"] = memory.peak_bytes;
  j["rss"] = memory.peak_rss_bytes;
  j["at"] = memory.peak_at;
  return j;
}

std::vector<std::string> gather_strings(const std::string& mine, int root, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm);
  std::vector<int> offsets(static_cast<std::size_t>(size), 0);
  std::string all;
  if (rank == root) {
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
              root, comm);
  std::vector<std::string> out;
  if (rank == root)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
}
}  // namespace

madpipe::plan::Trace madpipe::runtime::TraceRecorder::gather(int root,
                                                             const plan::TraceRankMemory& memory,
                                                             MPI_Comm pipeline) const {
  nlohmann::json received = nlohmann::json::array();
  for (const auto& r : received_)
    received.push_back(
        {static_cast<int>(r.kind), r.stage, r.step, r.micro_batch, r.from, r.done_ms});
  const std::vector<std::string> parts =
      gather_strings(records_of(ops_, sent_, received, memory).dump(), root, pipeline);
  plan::Trace trace;
  if (parts.empty()) return trace;
  trace.ranks = static_cast<int>(parts.size());
  // (kind, stage, step, micro-batch, receiver) -> when the receiver had the data
  std::map<std::tuple<int, int, int, int, int>, double> arrivals;
  std::vector<nlohmann::json> records;
  for (int r = 0; r < trace.ranks; ++r) {
    records.push_back(nlohmann::json::parse(parts[r]));
    for (const auto& x : records.back()["received"])
      arrivals[{x[0].get<int>(), x[1].get<int>(), x[2].get<int>(), x[3].get<int>(), r}] =
          x[5].get<double>();
  }
  for (int r = 0; r < trace.ranks; ++r) {
    const nlohmann::json& j = records[r];
    for (const auto& x : j["ops"])
      trace.ops.push_back({static_cast<plan::TraceOpKind>(x[0].get<int>()), r, x[1].get<int>(),
                           x[2].get<int>(), x[3].get<int>(), x[4].get<double>(),
                           x[5].get<double>()});
    for (const auto& x : j["sent"]) {
      plan::TraceTransfer t{static_cast<TraceTransferKind>(x[0].get<int>()),
                            x[1].get<int>(),
                            x[2].get<int>(),
                            x[3].get<int>(),
                            r,
                            x[4].get<int>(),
                            x[5].get<std::int64_t>(),
                            x[6].get<double>(),
                            x[6].get<double>()};
      const auto it = arrivals.find({x[0].get<int>(), t.stage, t.step, t.micro_batch, t.to});
      if (it == arrivals.end()) continue;  // received after tracing stopped
      t.end_ms = std::max(t.start_ms, it->second);
      trace.transfers.push_back(t);
    }
    trace.memory.push_back({r, j["peak"].get<std::int64_t>(), j["rss"].get<std::int64_t>(),
                            j["at"].get<std::string>()});
  }
  return trace;
}
