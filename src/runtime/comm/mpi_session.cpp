#include "runtime/comm/mpi_session.hpp"

#include "core/error.hpp"
#include "core/exit_codes.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

madpipe::runtime::MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      throw Error(ErrorKind::Runtime, "", "mpi", "MPI_Init_thread failed");
    owns_mpi_ = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  gpu_peers_ = processes_seeing_the_same_gpus();
}

madpipe::runtime::LocalGroup madpipe::runtime::processes_seeing_the_same_gpus() {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm node, peers;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string devices = visible == nullptr ? std::string("\x01unset") : visible;
  const int color = static_cast<int>(std::hash<std::string>{}(devices)&0x3fffffff);
  MPI_Comm_split(node, color, world_rank, &peers);
  LocalGroup group;
  MPI_Comm_rank(peers, &group.rank);
  MPI_Comm_size(peers, &group.size);
  MPI_Comm_free(&peers);
  MPI_Comm_free(&node);
  return group;
}

madpipe::runtime::MpiSession::~MpiSession() {
  if (!owns_mpi_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void madpipe::runtime::MpiSession::abort(const std::string& message, int code) const {
  std::fprintf(stderr, "rank %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

void madpipe::runtime::MpiSession::run_on_every_rank(const std::function<void()>& work,
                                                     int code) const {
  std::string failure;
  try {
    work();
  } catch (const std::exception& e) {
    failure = e.what();
    if (failure.empty()) failure = "failed";
  }
  if (all_reduce_sum(failure.empty() ? 0.0 : 1.0) == 0) return;
  if (!failure.empty()) {
    std::fprintf(stderr, "rank %d: %s\n", rank_, failure.c_str());
    std::fflush(stderr);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string madpipe::runtime::broadcast_string(const std::string& value, int root) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long long length = static_cast<long long>(value.size());
  MPI_Bcast(&length, 1, MPI_LONG_LONG, root, MPI_COMM_WORLD);
  std::string out = rank == root ? value : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, MPI_COMM_WORLD);
  return out;
}

double madpipe::runtime::all_reduce_sum(double value) {
  double out = 0;
  MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

std::vector<double> madpipe::runtime::all_reduce_sum(std::vector<double> values, double timeout_s) {
  std::vector<double> out(values.size());
  if (!values.empty())
    all_reduce_within(values.data(), out.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                      MPI_SUM, MPI_COMM_WORLD, timeout_s,
                      "for the other ranks to sum their values (is a rank stuck or gone?)");
  return out;
}

void madpipe::runtime::all_reduce_within(const void* in, void* out, int count, MPI_Datatype type,
                                         MPI_Op op, MPI_Comm comm, double timeout_s,
                                         const std::string& what) {
  if (timeout_s <= 0) {
    MPI_Allreduce(in, out, count, type, op, comm);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(in, out, count, type, op, comm, &request);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  wait_with_deadline(request, timeout_s, rank, what);
}

std::string madpipe::runtime::computed_on_rank0(int rank,
                                                const std::function<std::string()>& produce) {
  std::string text, failure;
  int exit_code = madpipe::kExitFinished;
  if (rank == 0) {
    try {
      text = produce();
    } catch (const std::exception& e) {
      failure = e.what();
      exit_code = madpipe::exit_code_of(e);
    }
  }
  failure = madpipe::runtime::broadcast_string(failure, 0);
  MPI_Bcast(&exit_code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failure.empty()) return madpipe::runtime::broadcast_string(text, 0);
  // Thrown again on every rank as what it was, so that every rank exits with its status.
  if (exit_code == madpipe::kExitNoPlanFits) throw madpipe::NoPlanFits("", failure);
  throw madpipe::Error(exit_code == madpipe::kExitBadInput ? madpipe::ErrorKind::InvalidInput
                                                           : madpipe::ErrorKind::Runtime,
                       "", "", failure);
}

void madpipe::runtime::wait_with_deadline(MPI_Request& request, double timeout_s, int rank,
                                          const std::string& what) {
  wait_until(
      [&request] {
        int done = 0;
        MPI_Test(&request, &done, MPI_STATUS_IGNORE);
        return done != 0;
      },
      timeout_s, rank, what);
}

void madpipe::runtime::wait_until(const std::function<bool()>& done, double timeout_s, int rank,
                                  const std::string& what, bool spin) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  PollPacer pacer;
  for (long polls = 0;; ++polls) {
    if (done()) return;
    if (timeout_s > 0 && polls % 64 == 63 && std::chrono::steady_clock::now() > deadline) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_s);
      throw Error(ErrorKind::Runtime, "", "transfer-timeout",
                  "rank " + std::to_string(rank) + " waited more than " + limit + " s " + what);
    }
    if (spin)
      std::this_thread::yield();
    else
      pacer.pause();
  }
}

void madpipe::runtime::PollPacer::pause() {
  if (std::chrono::steady_clock::now() - since_ < kSpinFor) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(kSleep);
  }
}

void madpipe::runtime::keep_alive_until_exit(std::shared_ptr<void> owned) {
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never destroyed, on purpose
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(owned));
}
