// NCCL emulated over MPI on CPU tensors, for tests of the NCCL transport on CPU ranks
// (MADPIPE_NCCL_EMULATION=1). Beyond moving the data, it checks the rules NCCL leaves undefined
// or answers with a hang, and fails the call that breaks one with a message naming the ranks and
// calls ("NCCL rule broken: ..."):
// * every member of a communicator calls its collectives (split, all-reduce) in the same order,
//   with matching arguments; a member that never calls one is reported after the timeout;
// * a communicator's sends and receives between two ranks pair up in order, with equal sizes and
//   element types;
// * no buffer is written while an operation on it is in flight (a send's data is checksummed
//   when posted and when done; a receive or all-reduce into memory in flight is refused);
// * group calls are balanced, a message to the rank itself has both halves in one group, and no
//   event is recorded nor communicator made or destroyed inside an open group.
// A send completes only once its receiver takes it (MPI_Issend), as an NCCL send does.

#include "core/error.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl_api.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mr = madpipe::runtime;
namespace nccl = madpipe::runtime::nccl;

namespace {

constexpr int kMessageTag = 7;

[[noreturn]] void rule_broken(const std::string& what) {
  throw madpipe::Error(madpipe::ErrorKind::Runtime, "", "transport", "NCCL rule broken: " + what);
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

struct Op;

struct EmulatedComm {
  std::string label;
  MPI_Comm messages = MPI_COMM_NULL;  // point-to-point, and the split itself
  MPI_Comm checks = MPI_COMM_NULL;    // the rule checks of collectives
  MPI_Comm sums = MPI_COMM_NULL;      // all-reduce payloads
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // of its members, by rank
  int splits = 0;
  int sums_started = 0;
  std::map<int, long> sent;      // messages so far, per peer
  std::map<int, long> received;  // receives posted so far, per peer
  bool aborted = false;
  std::map<int, std::deque<std::shared_ptr<Op>>> unmatched;  // receives, by peer, in order

  // "'channel 0->1' (world ranks 0, 1)"
  std::string name() const {
    std::string ranks;
    for (int r : world_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return "'" + label + "' (world ranks " + ranks + ")";
  }
  int world_of(int r) const { return world_ranks.at(static_cast<std::size_t>(r)); }
};

struct WireHeader {
  std::int64_t sequence = 0;
  std::int64_t bytes = 0;
  std::int64_t dtype = 0;
};

std::uint64_t checksum(const at::Tensor& t) {
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

std::string bytes_of(std::int64_t bytes, std::int64_t dtype) {
  return std::to_string(bytes) + " bytes of " +
         std::string(c10::toString(static_cast<c10::ScalarType>(dtype)));
}

struct Op {
  enum class Kind { Send, Recv, Sum };
  Kind kind = Kind::Send;
  EmulatedComm* comm = nullptr;
  int peer = 0;       // rank in comm (send, recv)
  long sequence = 0;  // send or receive number between the two ranks; all-reduce number
  at::Tensor tensor;
  std::vector<char> wire;  // a send's header and data, or what a receive took
  std::uint64_t sent_checksum = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  bool matched = false;  // a receive whose message is arriving
  bool done = false;

  std::string describe() const {
    const std::string number = " #" + std::to_string(sequence + 1);
    switch (kind) {
      case Kind::Send:
        return "send" + number + " to rank " + std::to_string(comm->world_of(peer));
      case Kind::Recv:
        return "receive" + number + " from rank " + std::to_string(comm->world_of(peer));
      case Kind::Sum:
        return "all-reduce" + number;
    }
    return "";
  }
  bool overlaps(const at::Tensor& t) const {
    const auto* a = static_cast<const char*>(tensor.data_ptr());
    const auto* b = static_cast<const char*>(t.data_ptr());
    return tensor.nbytes() > 0 && t.nbytes() > 0 && a < b + t.nbytes() && b < a + tensor.nbytes();
  }
};
using OpPtr = std::shared_ptr<Op>;

class EmulatedApi;

class EmulatedEvent final : public nccl::Event {
 public:
  EmulatedEvent(EmulatedApi& api, std::vector<OpPtr> ops) : api_(api), ops_(std::move(ops)) {}
  bool done() override;
  const std::vector<OpPtr>& ops() const noexcept { return ops_; }

 private:
  EmulatedApi& api_;
  std::vector<OpPtr> ops_;
};

class EmulatedApi final : public nccl::Api {
 public:
  explicit EmulatedApi(double timeout_s) : timeout_s_(timeout_s), streams_(1) {}
  ~EmulatedApi() override {
    // Operations still in flight (an aborted run) keep their buffers to the end.
    for (auto& stream : streams_)
      for (OpPtr& op : stream)
        if (!op->done) mr::keep_alive_until_exit(op);
  }

  std::string name() const override { return "NCCL emulation over MPI"; }
  bool host_runs_compute() const override { return true; }

  nccl::Comm init(MPI_Comm over, const std::string& label) override {
    outside_group("ncclCommInitRank of " + label);
    return adopt(over, label);
  }

  nccl::Comm split(nccl::Comm parent_handle, int color, int key,
                   const std::string& label) override {
    EmulatedComm& parent = comm_of(parent_handle);
    outside_group("ncclCommSplit of " + parent.name());
    // What each member splits for (its label names the channel): all must split for the same.
    struct Call {
      std::int64_t number, color, key;
      char label[64];
    };
    Call mine{parent.splits++, color, key, {}};
    std::snprintf(mine.label, sizeof mine.label, "%s", label.c_str());
    std::vector<Call> all(static_cast<std::size_t>(parent.size));
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, parent.checks,
                   &request);
    const std::string call = "ncclCommSplit #" + std::to_string(mine.number + 1) + " of " +
                             parent.name() + " (for " + label + ")";
    mr::wait_with_deadline(
        request, timeout_s_, world_rank(),
        "in its " + call + " for a member that never called it (NCCL hangs here)");
    for (int r = 0; r < parent.size; ++r) {
      const Call& theirs = all[static_cast<std::size_t>(r)];
      if (theirs.number != mine.number || std::string(theirs.label) != mine.label)
        rule_broken("the members of " + parent.name() + " disagree on a split: rank " +
                    std::to_string(world_rank()) + " calls its " + call + " while rank " +
                    std::to_string(parent.world_of(r)) + " calls its ncclCommSplit #" +
                    std::to_string(theirs.number + 1) + " for " + theirs.label);
      if (r != parent.rank && color >= 0 && theirs.color == color && theirs.key == key)
        rule_broken("ranks " + std::to_string(world_rank()) + " and " +
                    std::to_string(parent.world_of(r)) + " both join color " +
                    std::to_string(color) + " with key " + std::to_string(key) + " in their " +
                    call);
    }
    MPI_Comm split_comm = MPI_COMM_NULL;
    MPI_Comm_split(parent.messages, color < 0 ? MPI_UNDEFINED : color, key, &split_comm);
    if (split_comm == MPI_COMM_NULL) return {};
    nccl::Comm made = adopt(split_comm, label);
    MPI_Comm_free(&split_comm);
    return made;
  }

  void group_start() override { ++group_depth_; }

  void group_end() override {
    if (group_depth_ == 0) rule_broken("ncclGroupEnd without an open ncclGroupStart");
    if (--group_depth_ > 0) return;
    for (const auto& [comm, counts] : self_messages_)
      if (counts.first != counts.second)
        rule_broken("rank " + std::to_string(world_rank()) + " grouped " +
                    std::to_string(counts.first) + " sends to itself with " +
                    std::to_string(counts.second) + " receives from itself on " + comm->name() +
                    " (NCCL hangs on a half of a message to self)");
    self_messages_.clear();
  }

  void send(const at::Tensor& data, int peer, nccl::Comm handle, nccl::StreamId stream) override {
    EmulatedComm& comm = comm_of(handle);
    auto op = make_op(Op::Kind::Send, comm, peer, data, "send");
    check_not_written(*op, /*writes=*/false);
    op->sequence = comm.sent[peer]++;
    WireHeader header{op->sequence, static_cast<std::int64_t>(data.nbytes()),
                      static_cast<std::int64_t>(data.scalar_type())};
    op->wire.resize(sizeof header + data.nbytes());
    std::memcpy(op->wire.data(), &header, sizeof header);
    if (data.nbytes() > 0)
      std::memcpy(op->wire.data() + sizeof header, data.data_ptr(), data.nbytes());
    op->sent_checksum = checksum(data);
    if (peer == comm.rank) ++self_messages_[&comm].first;
    MPI_Issend(op->wire.data(), static_cast<int>(op->wire.size()), MPI_BYTE, peer, kMessageTag,
               comm.messages, &op->request);
    queue(stream, std::move(op));
  }

  void recv(const at::Tensor& buffer, int peer, nccl::Comm handle, nccl::StreamId stream) override {
    EmulatedComm& comm = comm_of(handle);
    auto op = make_op(Op::Kind::Recv, comm, peer, buffer, "receive");
    check_not_written(*op, /*writes=*/true);
    op->sequence = comm.received[peer]++;
    if (peer == comm.rank) ++self_messages_[&comm].second;
    comm.unmatched[peer].push_back(op);
    queue(stream, std::move(op));
  }

  void all_reduce_sum(const at::Tensor& buffer, nccl::Comm handle, nccl::StreamId stream) override {
    EmulatedComm& comm = comm_of(handle);
    auto op = make_op(Op::Kind::Sum, comm, comm.rank, buffer, "all-reduce");
    check_not_written(*op, /*writes=*/true);
    op->sequence = comm.sums_started++;
    if (buffer.scalar_type() != at::kFloat && buffer.scalar_type() != at::kDouble)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "the NCCL emulation sums float or double tensors only");
    // Every member sums the same count of the same type (NCCL's behaviour is undefined else).
    const std::int64_t numel = buffer.numel(), dtype = static_cast<int>(buffer.scalar_type());
    std::int64_t mine[6] = {op->sequence, -op->sequence, numel, -numel, dtype, -dtype};
    std::int64_t most[6];
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Iallreduce(mine, most, 6, MPI_INT64_T, MPI_MAX, comm.checks, &request);
    mr::wait_with_deadline(
        request, timeout_s_, world_rank(),
        "in " + op->describe() + " of " + comm.name() + " for a member that never called it");
    for (int i = 0; i < 6; ++i)
      if (most[i] != mine[i])
        rule_broken("the members of " + comm.name() + " differ in their " + op->describe() +
                    ": rank " + std::to_string(world_rank()) + " sums " + std::to_string(numel) +
                    " " + c10::toString(buffer.scalar_type()) + " values as its all-reduce #" +
                    std::to_string(op->sequence + 1) +
                    ", another member another count, type or call");
    MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), static_cast<int>(numel),
                   buffer.scalar_type() == at::kDouble ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, comm.sums,
                   &op->request);
    queue(stream, std::move(op));
  }

  std::string async_error(nccl::Comm) override { return ""; }

  void abort(nccl::Comm handle) noexcept override {
    if (handle) static_cast<EmulatedComm*>(handle.handle)->aborted = true;
  }

  void destroy(nccl::Comm handle) noexcept override {
    // Its MPI communicators stay: freeing them is collective in spirit, and a peer may be gone.
    if (group_depth_ > 0)
      std::fprintf(stderr, "rank %d: NCCL rule broken: a communicator destroyed inside a group\n",
                   world_rank());
    (void)handle;
  }

  nccl::StreamId new_stream() override {
    streams_.emplace_back();
    return static_cast<nccl::StreamId>(streams_.size() - 1);
  }

  std::unique_ptr<nccl::Event> record(nccl::StreamId stream) override {
    if (group_depth_ > 0)
      rule_broken("rank " + std::to_string(world_rank()) +
                  " records an event inside an open group: the group's operations are not "
                  "issued yet, so the event does not cover them");
    auto& ops = stream_at(stream);
    ops.erase(std::remove_if(ops.begin(), ops.end(), [](const OpPtr& op) { return op->done; }),
              ops.end());
    return std::make_unique<EmulatedEvent>(*this, ops);
  }

  void stream_wait(nccl::StreamId stream, nccl::Event& event) override {
    auto& ops = stream_at(stream);
    for (const OpPtr& op : static_cast<EmulatedEvent&>(event).ops())
      if (!op->done) ops.push_back(op);
  }

  void hold_until_done(const at::Tensor&, nccl::StreamId) override {}  // ops own their tensors

  void progress_all() {
    for (auto& stream : streams_)
      for (std::size_t i = 0; i < stream.size(); ++i) progress(*stream[i]);
  }

  // Moves `op` on; throws when its completion shows a broken rule.
  void progress(Op& op) {
    if (op.done) return;
    if (op.kind == Op::Kind::Recv && !op.matched) {
      match_in_order(*op.comm, op.peer);
      if (!op.matched) return;
    }
    int complete = 0;
    MPI_Test(&op.request, &complete, MPI_STATUS_IGNORE);
    if (!complete) return;
    op.done = true;
    if (op.kind == Op::Kind::Send && checksum(op.tensor) != op.sent_checksum)
      rule_broken("rank " + std::to_string(world_rank()) + " wrote into the data of its " +
                  op.describe() + " on " + op.comm->name() + " before the send was done");
    if (op.kind == Op::Kind::Recv) deliver(op);
  }

 private:
  // The messages that have arrived from `peer` go to its receives in the order they were posted.
  static void match_in_order(EmulatedComm& comm, int peer) {
    auto& waiting = comm.unmatched[peer];
    while (!waiting.empty()) {
      Op& op = *waiting.front();
      int arrived = 0;
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      MPI_Improbe(peer, kMessageTag, comm.messages, &arrived, &message, &status);
      if (!arrived) return;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      op.wire.resize(static_cast<std::size_t>(count));
      MPI_Imrecv(op.wire.data(), count, MPI_BYTE, &message, &op.request);
      op.matched = true;
      waiting.pop_front();
    }
  }

  void deliver(Op& op) {
    WireHeader header;
    std::memcpy(&header, op.wire.data(), sizeof header);
    const auto expected_bytes = static_cast<std::int64_t>(op.tensor.nbytes());
    const auto expected_dtype = static_cast<std::int64_t>(op.tensor.scalar_type());
    const std::string peer = std::to_string(op.comm->world_of(op.peer));
    if (header.sequence != op.sequence)
      rule_broken("on " + op.comm->name() + ", rank " + std::to_string(world_rank()) + "'s " +
                  op.describe() + " took rank " + peer + "'s send #" +
                  std::to_string(header.sequence + 1));
    if (header.bytes != expected_bytes || header.dtype != expected_dtype)
      rule_broken("on " + op.comm->name() + ", rank " + std::to_string(world_rank()) + "'s " +
                  op.describe() + " expects " + bytes_of(expected_bytes, expected_dtype) +
                  " but rank " + peer + "'s send #" + std::to_string(header.sequence + 1) +
                  " carries " + bytes_of(header.bytes, header.dtype));
    if (expected_bytes > 0)
      std::memcpy(op.tensor.data_ptr(), op.wire.data() + sizeof header, op.tensor.nbytes());
    op.wire = {};
  }

  nccl::Comm adopt(MPI_Comm over, const std::string& label) {
    auto comm = std::make_unique<EmulatedComm>();
    comm->label = label;
    MPI_Comm_dup(over, &comm->messages);
    MPI_Comm_dup(over, &comm->checks);
    MPI_Comm_dup(over, &comm->sums);
    MPI_Comm_rank(over, &comm->rank);
    MPI_Comm_size(over, &comm->size);
    comm->world_ranks.resize(static_cast<std::size_t>(comm->size));
    const int me = world_rank();
    MPI_Allgather(&me, 1, MPI_INT, comm->world_ranks.data(), 1, MPI_INT, over);
    comms_.push_back(std::move(comm));
    return nccl::Comm{comms_.back().get()};
  }

  EmulatedComm& comm_of(nccl::Comm handle) const {
    if (!handle)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "an NCCL call on a null communicator");
    auto& comm = *static_cast<EmulatedComm*>(handle.handle);
    if (comm.aborted)
      throw madpipe::Error(madpipe::ErrorKind::Runtime, "", "transport",
                           "an NCCL call on the aborted communicator " + comm.name());
    return comm;
  }

  std::vector<OpPtr>& stream_at(nccl::StreamId stream) {
    if (stream < 0 || stream >= static_cast<int>(streams_.size()))
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           "NCCL emulation: no stream " + std::to_string(stream));
    return streams_[static_cast<std::size_t>(stream)];
  }

  void outside_group(const std::string& call) const {
    if (group_depth_ > 0)
      rule_broken("rank " + std::to_string(world_rank()) + " calls " + call +
                  " inside an open group");
  }

  OpPtr make_op(Op::Kind kind, EmulatedComm& comm, int peer, const at::Tensor& tensor,
                const char* what) const {
    if (!tensor.device().is_cpu() || !tensor.is_contiguous())
      throw madpipe::Error(
          madpipe::ErrorKind::Internal, "", "transport",
          std::string("the NCCL emulation's ") + what + " takes contiguous CPU tensors");
    if (peer < 0 || peer >= comm.size)
      throw madpipe::Error(madpipe::ErrorKind::Internal, "", "transport",
                           std::string("NCCL ") + what + " to rank " + std::to_string(peer) +
                               " of " + comm.name() + ", which has " + std::to_string(comm.size) +
                               " ranks");
    if (kind != Op::Kind::Sum && peer == comm.rank && group_depth_ == 0)
      rule_broken("rank " + std::to_string(world_rank()) + " posts a " + what + " to itself on " +
                  comm.name() + " outside a group (NCCL hangs: both halves must be in one group)");
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->comm = &comm;
    op->peer = peer;
    op->tensor = tensor;
    return op;
  }

  // A buffer in flight is written by no new operation (and, for `writes`, read by none).
  void check_not_written(const Op& fresh, bool writes) {
    for (auto& stream : streams_)
      for (OpPtr& op : stream) {
        if (op->done || !op->overlaps(fresh.tensor)) continue;
        if (!writes && op->kind == Op::Kind::Send) continue;  // two sends may read one buffer
        progress(*op);
        if (op->done) continue;
        rule_broken("rank " + std::to_string(world_rank()) + " posts a " +
                    (fresh.kind == Op::Kind::Send   ? std::string("send")
                     : fresh.kind == Op::Kind::Recv ? std::string("receive")
                                                    : std::string("all-reduce")) +
                    " on " + fresh.comm->name() + " over memory that its " + op->describe() +
                    " on " + op->comm->name() + " still uses");
      }
  }

  void queue(nccl::StreamId stream, OpPtr op) { stream_at(stream).push_back(std::move(op)); }

  double timeout_s_;
  int group_depth_ = 0;
  std::vector<std::vector<OpPtr>> streams_;  // the operations not known done, by stream
  std::vector<std::unique_ptr<EmulatedComm>> comms_;
  std::map<const EmulatedComm*, std::pair<int, int>> self_messages_;  // in the open group
};

bool EmulatedEvent::done() {
  api_.progress_all();  // a device runs every stream at once: a peer's send may need our receive
  return std::all_of(ops_.begin(), ops_.end(), [](const OpPtr& op) { return op->done; });
}

}  // namespace

std::unique_ptr<nccl::Api> nccl::make_emulated_api(double timeout_s) {
  return std::make_unique<EmulatedApi>(timeout_s);
}

bool nccl::emulation_requested() {
  const char* value = std::getenv("MADPIPE_NCCL_EMULATION");
  return value && std::string(value) == "1";
}
