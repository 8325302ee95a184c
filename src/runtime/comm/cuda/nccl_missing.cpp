// The NCCL entry points of a build without CUDA LibTorch or NCCL: each says so.

#include "core/error.hpp"
#include "runtime/comm/nccl.hpp"

namespace mr = madpipe::runtime;

namespace {
[[noreturn]] void not_built() {
  throw madpipe::Error(madpipe::ErrorKind::Unsupported, "", "transport",
                       "nccl is not built in (it needs a CUDA LibTorch and NCCL at configure "
                       "time; see docs/runtime.md); use --transport mpi");
}
}  // namespace

bool mr::nccl_built() { return false; }

std::unique_ptr<mr::NcclCommunicators> mr::make_nccl_communicators(MPI_Comm, MPI_Comm,
                                                                   const c10::Device&) {
  not_built();
}

std::unique_ptr<mr::Transport> mr::make_nccl_transport(NcclCommunicators&, double) { not_built(); }

std::unique_ptr<mr::ReplicaReducer> mr::make_nccl_reducer(NcclCommunicators&) { not_built(); }
