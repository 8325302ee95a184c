// nccl::Api over the NCCL library and CUDA streams and events: the only translation unit of the
// transport that includes NCCL.

#include "core/error.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"

#include <memory>
#include <string>
#include <vector>

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

namespace mr = madpipe::runtime;
namespace nccl = madpipe::runtime::nccl;

namespace {

// Throws Error{Runtime} (field "transport") naming `call` and NCCL's message unless `result` is
// success (or in progress, for a non-blocking communicator).
void check(ncclResult_t result, const char* call) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  const char* last = ncclGetLastError(nullptr);
  throw madpipe::Error(madpipe::ErrorKind::Runtime, "", "transport",
                       std::string(call) + " failed: " + ncclGetErrorString(result) +
                           (last && *last ? std::string(" (") + last + ")" : std::string()));
}

ncclComm_t raw(nccl::Comm comm) { return static_cast<ncclComm_t>(comm.handle); }

ncclDataType_t sum_type(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kDouble:
      return ncclFloat64;
    case at::kFloat:
      return ncclFloat32;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    default:
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           std::string("no NCCL all-reduce of ") + c10::toString(t.scalar_type()));
  }
}

class CudaEvent final : public nccl::Event {
 public:
  bool done() override { return event.query(); }
  at::cuda::CUDAEvent event;
};

class LibraryApi final : public nccl::Api {
 public:
  explicit LibraryApi(const c10::Device& device) : device_(device) {
    streams_.push_back(nullptr);  // kComputeStream: the current stream, read at each use
  }
  ~LibraryApi() override {
    for (cudaStream_t stream : streams_)
      if (stream) cudaStreamDestroy(stream);
  }

  std::string name() const override {
    int version = 0;
    ncclGetVersion(&version);
    return "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
           "." + std::to_string(version % 100);
  }
  bool host_runs_compute() const override { return false; }

  nccl::Comm init(MPI_Comm over, const std::string&) override {
    int rank = 0, size = 1;
    MPI_Comm_rank(over, &rank);
    MPI_Comm_size(over, &size);
    ncclUniqueId id;
    if (rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, over);
    ncclComm_t comm = nullptr;
    check(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    return nccl::Comm{comm};
  }

  nccl::Comm split(nccl::Comm parent, int color, int key, const std::string&) override {
    ncclComm_t comm = nullptr;
    check(ncclCommSplit(raw(parent), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &comm, nullptr),
          "ncclCommSplit");
    return nccl::Comm{comm};
  }

  void group_start() override { check(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() override { check(ncclGroupEnd(), "ncclGroupEnd"); }

  void send(const at::Tensor& data, int peer, nccl::Comm comm, nccl::StreamId stream) override {
    check(ncclSend(data.data_ptr(), data.nbytes(), ncclUint8, peer, raw(comm), cuda(stream)),
          "ncclSend");
  }
  void recv(const at::Tensor& buffer, int peer, nccl::Comm comm, nccl::StreamId stream) override {
    check(ncclRecv(buffer.data_ptr(), buffer.nbytes(), ncclUint8, peer, raw(comm), cuda(stream)),
          "ncclRecv");
  }
  void all_reduce_sum(const at::Tensor& buffer, nccl::Comm comm, nccl::StreamId stream) override {
    check(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(),
                        static_cast<std::size_t>(buffer.numel()), sum_type(buffer), ncclSum,
                        raw(comm), cuda(stream)),
          "ncclAllReduce");
  }

  std::string async_error(nccl::Comm comm) override {
    ncclResult_t state = ncclSuccess;
    check(ncclCommGetAsyncError(raw(comm), &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return ncclGetErrorString(state);
  }
  void abort(nccl::Comm comm) noexcept override { ncclCommAbort(raw(comm)); }
  void destroy(nccl::Comm comm) noexcept override { ncclCommDestroy(raw(comm)); }

  nccl::StreamId new_stream() override {
    // Streams of their own, not the pool's: two channels sharing a stream would serialise.
    const c10::cuda::CUDAGuard guard(device_.index());
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
      throw madpipe::Error(madpipe::ErrorKind::Runtime, "", "transport",
                           "cannot create a CUDA stream");
    streams_.push_back(stream);
    return static_cast<nccl::StreamId>(streams_.size() - 1);
  }

  std::unique_ptr<nccl::Event> record(nccl::StreamId stream) override {
    auto event = std::make_unique<CudaEvent>();
    event->event.record(torch_stream(stream));
    return event;
  }
  void stream_wait(nccl::StreamId stream, nccl::Event& event) override {
    static_cast<CudaEvent&>(event).event.block(torch_stream(stream));
  }
  void hold_until_done(const at::Tensor& tensor, nccl::StreamId stream) override {
    tensor.record_stream(torch_stream(stream).unwrap());
  }

 private:
  c10::cuda::CUDAStream torch_stream(nccl::StreamId stream) const {
    if (stream == nccl::kComputeStream) return c10::cuda::getCurrentCUDAStream(device_.index());
    return c10::cuda::getStreamFromExternal(streams_.at(static_cast<std::size_t>(stream)),
                                            device_.index());
  }
  cudaStream_t cuda(nccl::StreamId stream) const { return torch_stream(stream).stream(); }

  c10::Device device_;
  std::vector<cudaStream_t> streams_;  // created here (but the compute stream), destroyed here
};

}  // namespace

bool mr::nccl_built() { return true; }

std::unique_ptr<nccl::Api> nccl::make_library_api(const c10::Device& device) {
  return std::make_unique<LibraryApi>(device);
}
