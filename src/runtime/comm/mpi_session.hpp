#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

namespace madpipe::runtime {

// One MPI process per GPU. Initialises MPI on construction and finalises it on destruction.
// A rank's place among some processes of its node.
struct LocalGroup {
  int rank = 0;
  int size = 1;
};

// Collective: the group of the node's processes whose CUDA_VISIBLE_DEVICES (unset counts as a
// value) is the caller's.
LocalGroup processes_seeing_the_same_gpus();

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int local_rank() const noexcept { return local_rank_; }  // rank among the processes of its node
  int local_size() const noexcept { return local_size_; }  // processes on this rank's node
  // This rank among the processes of its node that see the same GPUs (the same
  // CUDA_VISIBLE_DEVICES): one per GPU from a shared list, or one each with a GPU of its own
  // (Slurm's --gpus-per-task=1).
  const LocalGroup& gpu_peers() const noexcept { return gpu_peers_; }

  // Stops every rank: prints "rank N: <message>" and aborts the MPI job, so no peer waits forever.
  [[noreturn]] void abort(const std::string& message, int code = 1) const;
  // Collective: runs `work`, which every rank does alike (reading the data, checking the model).
  // When it throws on any rank, each rank it threw on prints "rank N: <message>", and once every
  // rank has, the job stops with `code`: no rank's abort cuts another's message short.
  void run_on_every_rank(const std::function<void()>& work, int code = 2) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  LocalGroup gpu_peers_;
  bool owns_mpi_ = false;
};

// Broadcasts a string from `root` to every rank.
std::string broadcast_string(const std::string& value, int root);

// Runs `produce` on rank 0 and gives its result to every rank; what it throws there is thrown
// on every rank (its message, and its exit status: core/exit_codes.hpp), so that no rank is left
// waiting and every rank exits alike.
std::string computed_on_rank0(int rank, const std::function<std::string()>& produce);

// MPI_Test until done, or with timeout_s > 0 until the time is up: then Error{Runtime} (field
// "transfer-timeout") "rank R waited more than T s <what>", so that a lost or stuck peer stops
// the run instead of hanging it. Polls as PollPacer says.
void wait_with_deadline(MPI_Request& request, double timeout_s, int rank, const std::string& what);
// The same loop over any condition: polls `done` until it returns true. `spin`: yield between
// polls instead of pacing (a GPU rank, whose host has cores of its own).
void wait_until(const std::function<bool()>& done, double timeout_s, int rank,
                const std::string& what, bool spin = false);

// The pause between two polls of a rank that waits for a message. A wait that has lasted
// kSpinFor yields between polls (the message is probably about to come); a longer one sleeps
// kSleep between polls, so that where ranks share cores (more ranks than cores, as on the CPU
// test machines) a waiting rank hands its core to the ranks that compute instead of spinning on
// it. A message is then noticed at most kSleep late. (MPI_Wait polls as well in Open MPI.)
class PollPacer {
 public:
  static constexpr std::chrono::microseconds kSpinFor{200};
  static constexpr std::chrono::microseconds kSleep{50};

  void pause();

 private:
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
};

// Keeps `owned` alive until the process exits. For what an active request still reads or writes
// when its owner is destroyed by an error: such a request may be neither waited for (the peer may
// never come; the rank must reach its abort) nor freed (MPI forbids freeing an active collective),
// so its buffer must outlive it.
void keep_alive_until_exit(std::shared_ptr<void> owned);

// MPI_Allreduce over `comm` that waits at most `timeout_s` (> 0; 0: for ever) for the other
// ranks, then throws as wait_with_deadline does, naming `what`: the per-step collectives of a run,
// so that a rank that stops (alive but silent) ends the others instead of hanging them.
void all_reduce_within(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op,
                       MPI_Comm comm, double timeout_s, const std::string& what);

// Sum over all ranks (a wait longer than `timeout_s` > 0 throws, as all_reduce_within).
double all_reduce_sum(double value);
std::vector<double> all_reduce_sum(std::vector<double> values,
                                   double timeout_s = 0);  // element-wise

}  // namespace madpipe::runtime
