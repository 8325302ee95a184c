#include "runtime/comm/cuda/nccl_communicators.hpp"

#include "core/error.hpp"

#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

namespace mr = madpipe::runtime;

void mr::nccl::check(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(nullptr);
  throw Error(ErrorKind::Runtime, "", "transport",
              std::string(call) + " failed: " + ncclGetErrorString(result) +
                  (last && *last ? std::string(" (") + last + ")" : std::string()));
}

namespace {
// A communicator over the ranks of `comm`, its unique id made by rank 0 and broadcast over MPI.
ncclComm_t communicator_over(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  ncclUniqueId id;
  if (rank == 0) mr::nccl::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, comm);
  ncclComm_t result = nullptr;
  mr::nccl::check(ncclCommInitRank(&result, size, id, rank), "ncclCommInitRank");
  return result;
}
}  // namespace

mr::nccl::Communicators::Communicators(MPI_Comm pipeline, MPI_Comm replicas,
                                       const c10::Device& device)
    : device_(device), replica_stream_(c10::cuda::getCurrentCUDAStream(device.index())) {
  MPI_Comm_rank(pipeline, &position_);
  MPI_Comm_size(pipeline, &pipeline_size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  pipeline_ = communicator_over(pipeline);
  replicas_ = communicator_over(replicas);
  replica_stream_ = new_stream();
}

mr::nccl::Communicators::~Communicators() {
  if (std::uncaught_exceptions() > 0) abort();  // a peer may never join a destroy
  for (ncclComm_t comm : all()) ncclCommDestroy(comm);
  for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
}

std::vector<ncclComm_t> mr::nccl::Communicators::all() const {
  std::vector<ncclComm_t> comms;
  if (aborted_) return comms;
  for (const auto& [pair, channel] : channels_)
    if (channel.comm) comms.push_back(channel.comm);
  if (pipeline_) comms.push_back(pipeline_);
  if (replicas_) comms.push_back(replicas_);
  return comms;
}

void mr::nccl::Communicators::abort() noexcept {
  for (ncclComm_t comm : all()) ncclCommAbort(comm);
  aborted_ = true;
}

c10::cuda::CUDAStream mr::nccl::Communicators::new_stream() {
  // Streams of their own, not the pool's: two channels sharing a stream would serialise.
  const c10::cuda::CUDAGuard guard(device_.index());
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    throw Error(ErrorKind::Runtime, "", "transport", "cannot create a CUDA stream");
  streams_.push_back(stream);
  return c10::cuda::getStreamFromExternal(stream, device_.index());
}

c10::cuda::CUDAStream mr::nccl::Communicators::compute_stream() const {
  return c10::cuda::getCurrentCUDAStream(device_.index());
}

void mr::nccl::Communicators::add_channels(const std::vector<std::pair<int, int>>& channels) {
  for (const auto& [from, to] : channels) {
    if (channels_.count({from, to})) continue;
    const bool mine = from == position_ || to == position_;
    ncclComm_t comm = nullptr;
    check(ncclCommSplit(pipeline_, mine ? from * pipeline_size_ + to : NCCL_SPLIT_NOCOLOR,
                        position_, &comm, nullptr),
          "ncclCommSplit");
    if (!mine) continue;
    const int other = from == position_ ? to : from;
    channels_.emplace(std::make_pair(from, to),
                      Channel{comm, other > position_ ? 1 : 0, new_stream()});
  }
}

mr::nccl::Channel& mr::nccl::Communicators::channel(int from, int to) {
  auto it = channels_.find({from, to});
  if (it == channels_.end())
    throw Error(ErrorKind::Internal, "", "transport",
                "no NCCL channel from rank " + std::to_string(from) + " to rank " +
                    std::to_string(to) + " (the plan's message channels were not added)");
  return it->second;
}

void mr::nccl::Communicators::check_errors(const std::string& context) {
  for (ncclComm_t comm : all()) {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess || state == ncclInProgress) continue;
    const std::string message = std::string("NCCL error ") + ncclGetErrorString(state) + " " +
                                context + " (rank " + std::to_string(world_rank_) +
                                "; its communicators are aborted)";
    abort();
    throw Error(ErrorKind::Runtime, "", "transport", message);
  }
}

void mr::nccl::Communicators::wait(at::cuda::CUDAEvent& event, double timeout_s,
                                   const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  for (long polls = 0;; ++polls) {
    if (event.query()) return;
    if (polls % 256 == 0) check_errors("while waiting " + what);
    if (timeout_s > 0 && polls % 256 == 255 && std::chrono::steady_clock::now() > deadline) {
      abort();
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_s);
      throw Error(ErrorKind::Runtime, "", "transfer-timeout",
                  "rank " + std::to_string(world_rank_) + " waited more than " + limit + " s " +
                      what + " over NCCL (is that rank stuck or gone? a longer step needs a " +
                      "larger --transfer-timeout; the communicators are aborted)");
    }
    std::this_thread::yield();
  }
}

bool mr::nccl_built() { return true; }

std::unique_ptr<mr::NcclCommunicators> mr::make_nccl_communicators(MPI_Comm pipeline,
                                                                   MPI_Comm replicas,
                                                                   const c10::Device& device) {
  if (!device.is_cuda())
    throw Error(
        ErrorKind::Unsupported, "", "transport",
        "nccl moves GPU tensors, but this rank runs on " + device.str() + " (use --transport mpi)");
  return std::make_unique<nccl::Communicators>(pipeline, replicas, device);
}
