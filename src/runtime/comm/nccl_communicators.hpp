#pragma once

// The NCCL communicators behind runtime/comm/nccl.hpp, shared by the transport and the reducer,
// over an nccl::Api (the library or its emulation).

#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

namespace madpipe::runtime::nccl {

struct Channel {
  Comm comm;
  int peer_rank = 0;  // the other side's rank in `comm`
  StreamId stream = kComputeStream;
};

class Communicators final : public NcclCommunicators {
 public:
  // Collective over `pipeline` and `replicas`. A communicator made before an error is aborted.
  Communicators(std::unique_ptr<Api> api, MPI_Comm pipeline, MPI_Comm replicas, double timeout_s);
  ~Communicators() override;

  void add_channels(const std::vector<std::pair<int, int>>& channels) override;
  void abort() noexcept override;

  Api& api() noexcept { return *api_; }
  int position() const noexcept { return position_; }
  int world_rank() const noexcept { return world_rank_; }
  double timeout_s() const noexcept { return timeout_s_; }
  // The channel of messages from `from` to `to`; throws Error{Internal} when it was never added.
  const Channel& channel(int from, int to) const;
  Comm replicas() const noexcept { return replicas_; }
  StreamId replica_stream() const noexcept { return replica_stream_; }

  // Polls every communicator's asynchronous error; on one, aborts them all and throws
  // Error{Runtime} naming `context`.
  void check_errors(const std::string& context);
  // Waits on the host for `event`, polling the communicators' errors; longer than `timeout_s`
  // (> 0) aborts them and throws Error{Runtime} (field "transfer-timeout") naming `what`.
  void wait(Event& event, double timeout_s, const std::string& what);
  // `stream` waits for what is queued on the compute stream so far.
  void after_compute(StreamId stream);

 private:
  std::vector<Comm> all() const;

  std::unique_ptr<Api> api_;
  double timeout_s_;
  int position_ = 0;
  int pipeline_size_ = 1;
  int world_rank_ = 0;
  bool aborted_ = false;
  Comm pipeline_;
  Comm replicas_;
  // Every channel split so far, on every rank (whether or not it is a member): a split is
  // collective over the pipeline, so all ranks must agree on which channels are new.
  std::set<std::pair<int, int>> split_;
  std::map<std::pair<int, int>, Channel> channels_;  // those this rank is a member of
  StreamId replica_stream_ = kComputeStream;
};

}  // namespace madpipe::runtime::nccl
