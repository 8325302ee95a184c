// The NCCL library in a build without CUDA LibTorch or NCCL: it says so. The emulation
// (runtime/comm/nccl_emulation.cpp) is there in every build.

#include "core/error.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"

namespace mr = madpipe::runtime;

bool mr::nccl_built() { return false; }

std::unique_ptr<mr::nccl::Api> mr::nccl::make_library_api(const c10::Device&) {
  throw madpipe::Error(madpipe::ErrorKind::Unsupported, "", "transport",
                       "nccl is not built in (it needs a CUDA LibTorch and NCCL at configure "
                       "time; see docs/runtime.md); use --transport mpi");
}
