#pragma once

#include "plan/trace.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace madpipe::runtime {

// Records what one rank executes for a madpipe.trace/1 file: its forwards and backwards, the
// transfers it posts and the ones it receives. The clock starts at construction, which every
// rank reaches right after a common barrier, so times of different ranks are comparable.
class TraceRecorder {
 public:
  explicit TraceRecorder(int rank);

  double now_ms() const;
  bool recording() const noexcept { return recording_; }
  void stop() noexcept { recording_ = false; }

  // Synchronous training: the step the next records belong to (micro-batches are per step).
  void begin_step(int step) noexcept { step_ = step; }
  // Asynchronous training runs one program over all micro-batches: micro-batch i belongs to
  // step i / per_step + 1 as its micro-batch i % per_step.
  void number_micro_batches_by_update(int per_step) noexcept { per_step_ = per_step; }
  // Records of later steps are dropped.
  void record_until_step(int last_step) noexcept { last_step_ = last_step; }

  void op(plan::TraceOpKind kind, int stage, int micro_batch, double start_ms, double end_ms);
  void sent(plan::TraceTransferKind kind, int stage, int micro_batch, int to, std::int64_t bytes,
            double posted_ms);
  void received(plan::TraceTransferKind kind, int stage, int micro_batch, int from, double done_ms);

  // Collective over `pipeline` (one replica's ranks): every rank's records and its `memory`
  // (whose rank field is ignored) meet on its rank `root`, which returns the trace (transfers
  // matched by what they carry); the other ranks return an empty trace.
  plan::Trace gather(int root, const plan::TraceRankMemory& memory,
                     MPI_Comm pipeline = MPI_COMM_WORLD) const;

 private:
  struct Received {
    plan::TraceTransferKind kind;
    int stage, step, micro_batch, from;
    double done_ms;
  };
  std::pair<int, int> step_and_micro_batch(int micro_batch) const noexcept;

  int rank_;
  std::chrono::steady_clock::time_point origin_;
  bool recording_ = true;
  int step_ = 1;
  int per_step_ = 0;
  int last_step_ = 1 << 30;
  std::vector<plan::TraceOp> ops_;
  std::vector<plan::TraceTransfer> sent_;  // end_ms unknown here
  std::vector<Received> received_;
};

}  // namespace madpipe::runtime
