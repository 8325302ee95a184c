#include "runtime/comm/nccl_communicators.hpp"

#include "core/error.hpp"
#include "runtime/comm/mpi_session.hpp"

#include <exception>

namespace mr = madpipe::runtime;

mr::nccl::Communicators::Communicators(std::unique_ptr<Api> api, MPI_Comm pipeline,
                                       MPI_Comm replicas, double timeout_s)
    : api_(std::move(api)), timeout_s_(timeout_s) {
  MPI_Comm_rank(pipeline, &position_);
  MPI_Comm_size(pipeline, &pipeline_size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  try {
    pipeline_ = api_->init(pipeline, "pipeline");
    replicas_ = api_->init(replicas, "replicas");
    replica_stream_ = api_->new_stream();
  } catch (...) {
    abort();  // the destructor does not run: what was made must not outlive the error
    throw;
  }
}

mr::nccl::Communicators::~Communicators() {
  if (std::uncaught_exceptions() > 0) abort();  // a peer may never join a destroy
  for (Comm comm : all()) api_->destroy(comm);
}

std::vector<mr::nccl::Comm> mr::nccl::Communicators::all() const {
  std::vector<Comm> comms;
  if (aborted_) return comms;
  for (const auto& [pair, channel] : channels_)
    if (channel.comm) comms.push_back(channel.comm);
  if (pipeline_) comms.push_back(pipeline_);
  if (replicas_) comms.push_back(replicas_);
  return comms;
}

void mr::nccl::Communicators::abort() noexcept {
  for (Comm comm : all()) api_->abort(comm);
  aborted_ = true;
}

void mr::nccl::Communicators::add_channels(const std::vector<std::pair<int, int>>& channels) {
  try {
    for (const auto& [from, to] : channels) {
      // Decided alike on every rank: a member alone skipping a split would leave the others
      // waiting in it.
      if (!split_.insert({from, to}).second) continue;
      const bool mine = from == position_ || to == position_;
      const Comm comm = api_->split(pipeline_, mine ? from * pipeline_size_ + to : -1, position_,
                                    "channel " + std::to_string(from) + "->" + std::to_string(to));
      if (!mine) continue;
      const int other = from == position_ ? to : from;
      channels_.emplace(std::make_pair(from, to),
                        Channel{comm, other > position_ ? 1 : 0, api_->new_stream()});
    }
  } catch (...) {
    abort();
    throw;
  }
}

const mr::nccl::Channel& mr::nccl::Communicators::channel(int from, int to) const {
  auto it = channels_.find({from, to});
  if (it == channels_.end())
    throw Error(ErrorKind::Internal, "", "transport",
                "no NCCL channel from rank " + std::to_string(from) + " to rank " +
                    std::to_string(to) + " (the plan's message channels were not added)");
  return it->second;
}

void mr::nccl::Communicators::check_errors(const std::string& context) {
  for (Comm comm : all()) {
    const std::string error = api_->async_error(comm);
    if (error.empty()) continue;
    const std::string message = "NCCL error " + error + " " + context + " (rank " +
                                std::to_string(world_rank_) + "; its communicators are aborted)";
    abort();
    throw Error(ErrorKind::Runtime, "", "transport", message);
  }
}

void mr::nccl::Communicators::wait(Event& event, double timeout_s, const std::string& what) {
  long polls = 0;
  try {
    wait_until(
        [&] {
          if (polls++ % 256 == 0) check_errors("while waiting " + what);
          return event.done();
        },
        timeout_s, world_rank_,
        what + " over " + api_->name() +
            " (is that rank stuck or gone? a longer step needs a larger --transfer-timeout; the "
            "communicators are aborted)",
        /*spin=*/!api_->host_runs_compute());
  } catch (...) {
    abort();  // a rule broken, an NCCL error or the timeout
    throw;
  }
}

void mr::nccl::Communicators::after_compute(StreamId stream) {
  const std::unique_ptr<Event> ready = api_->record(kComputeStream);
  api_->stream_wait(stream, *ready);
}

std::unique_ptr<mr::NcclCommunicators> mr::make_nccl_communicators(MPI_Comm pipeline,
                                                                   MPI_Comm replicas,
                                                                   const c10::Device& device,
                                                                   double timeout_s) {
  std::unique_ptr<nccl::Api> api;
  if (device.is_cuda()) {
    api = nccl::make_library_api(device);
  } else if (nccl::emulation_requested()) {
    api = nccl::make_emulated_api(timeout_s);
  } else {
    throw Error(ErrorKind::Unsupported, "", "transport",
                "nccl moves GPU tensors, but this rank runs on " + device.str() +
                    " (use --transport mpi; tests emulate NCCL on CPU ranks with "
                    "MADPIPE_NCCL_EMULATION=1)");
  }
  return std::make_unique<nccl::Communicators>(std::move(api), pipeline, replicas, timeout_s);
}
