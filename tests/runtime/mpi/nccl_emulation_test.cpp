// The NCCL transport on its emulation over MPI (runtime/comm/nccl_api.hpp), in every run of the
// suite: the defects only a multi-rank NCCL run shows, and the rules the emulation checks.

#include "core/error.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/nccl_api.hpp"
#include "runtime/comm/nccl_communicators.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

namespace mr = madpipe::runtime;
namespace nccl = madpipe::runtime::nccl;
using madpipe::testing::error_of;
using madpipe::testing::world_rank;
using madpipe::testing::world_size;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Communicators over every rank on the emulation; waits longer than `timeout_s` fail.
std::unique_ptr<nccl::Communicators> emulated(double timeout_s) {
  return std::make_unique<nccl::Communicators>(nccl::make_emulated_api(timeout_s), MPI_COMM_WORLD,
                                               MPI_COMM_SELF, timeout_s);
}

mr::MessageKey activation(int stage, int micro_batch, int sequence) {
  return {mr::Direction::Activation, stage, micro_batch, sequence};
}

// Along `channels`, each rank sends its rank (as 3 floats) once to every peer it has a channel to
// and checks what it receives.
void exchange_over(nccl::Communicators& comms, const std::vector<std::pair<int, int>>& channels) {
  std::unique_ptr<mr::Transport> transport = mr::make_nccl_transport(comms);
  const int me = world_rank();
  for (const auto& [from, to] : channels)
    if (to == me && from != me)
      transport->post_recv(from, activation(from, 0, 0), torch::empty({3}));
  for (const auto& [from, to] : channels)
    if (from == me && to != me)
      transport->post_send(to, activation(me, 0, 0), torch::full({3}, static_cast<float>(me)));
  for (const auto& [from, to] : channels) {
    if (to != me || from == me) continue;
    EXPECT_TRUE(torch::equal(transport->wait_recv(from, activation(from, 0, 0)),
                             torch::full({3}, static_cast<float>(from))))
        << "from rank " << from;
  }
  transport->wait_sends();
}

}  // namespace

// Re-planning adds the new plan's channels. A split is collective over the whole pipeline, so a
// channel that exists already must be skipped by every rank, not only by its two members: the
// others would wait in a split the members never join (P >= 3).
TEST(NcclReplanning, ChannelsAddedAgainAreSkippedOnEveryRank) {
  const int P = world_size();
  if (P < 3) GTEST_SKIP() << "needs 3 ranks or more";
  std::unique_ptr<nccl::Communicators> comms = emulated(20);
  std::vector<std::pair<int, int>> chain, ring;
  for (int g = 0; g + 1 < P; ++g) {
    chain.emplace_back(g, g + 1);
    chain.emplace_back(g + 1, g);
  }
  for (int g = 0; g < P; ++g) ring.emplace_back(g, (g + 1) % P);  // 1->2 is there already
  comms->add_channels(chain);
  exchange_over(*comms, chain);
  const std::string error = error_of([&] { comms->add_channels(ring); });
  EXPECT_EQ(error, "") << "rank " << world_rank();
  if (error.empty()) exchange_over(*comms, ring);
}

// A peer that never sends (alive, not dead) ends the wait after the timeout, with a message naming
// the waiting rank, the peer and the message.
TEST(NcclWatchdog, APeerThatNeverSendsIsNamedAfterTheTimeout) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::unique_ptr<nccl::Communicators> comms = emulated(0.3);
  comms->add_channels({{1, 0}});
  if (world_rank() == 0) {
    std::unique_ptr<mr::Transport> transport = mr::make_nccl_transport(*comms);
    transport->post_recv(1, activation(0, 3, 0), torch::empty({4}));
    const std::string error = error_of([&] { transport->wait_recv(1, activation(0, 3, 0)); });
    EXPECT_TRUE(contains(error,
                         "rank 0 waited more than 0.3 s for the activation of stage 0, "
                         "micro-batch 3 from rank 1 over NCCL emulation over MPI"))
        << error;
    EXPECT_TRUE(contains(error, "--transfer-timeout")) << error;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A receive of another size than its send is refused on the receiving rank, naming both.
TEST(NcclRules, ASizeMismatchIsRefused) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::unique_ptr<nccl::Communicators> comms = emulated(20);
  comms->add_channels({{0, 1}});
  std::unique_ptr<mr::Transport> transport = mr::make_nccl_transport(*comms);
  if (world_rank() == 0) {
    transport->post_send(1, activation(0, 0, 0), torch::ones({4}));
    transport->wait_sends();
  } else if (world_rank() == 1) {
    transport->post_recv(0, activation(0, 0, 0), torch::empty({8}));
    const std::string error = error_of([&] { transport->wait_recv(0, activation(0, 0, 0)); });
    EXPECT_TRUE(contains(error,
                         "NCCL rule broken: on 'channel 0->1' (world ranks 0, 1), rank 1's "
                         "receive #1 from rank 0 expects 32 bytes of Float but rank 0's "
                         "send #1 carries 16 bytes of Float"))
        << error;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The emulation's other rules, each broken once.
TEST(NcclRules, BrokenRulesFailTheCallNamingRanksAndCalls) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::unique_ptr<nccl::Api> api = nccl::make_emulated_api(20);
  const nccl::Comm all = api->init(MPI_COMM_WORLD, "all");
  const nccl::Comm quiet = api->init(MPI_COMM_WORLD, "quiet");  // no rank ever sends on it
  const nccl::StreamId stream = api->new_stream(), other_stream = api->new_stream();
  const int me = world_rank();
  // A message to oneself outside a group (NCCL hangs on it).
  const std::string self = error_of([&] { api->send(torch::ones({2}), me, all, stream); });
  EXPECT_TRUE(contains(self, "posts a send to itself on 'all'")) << self;
  EXPECT_TRUE(contains(self, "outside a group")) << self;
  // Unbalanced groups, and an event recorded inside an open one.
  EXPECT_TRUE(contains(error_of([&] { api->group_end(); }), "ncclGroupEnd without"));
  api->group_start();
  EXPECT_TRUE(contains(error_of([&] { api->record(stream); }), "inside an open group"));
  api->group_end();
  // A receive into memory an earlier receive still waits to fill.
  if (me == 1) {
    torch::Tensor buffer = torch::empty({4});
    api->recv(buffer, 0, quiet, other_stream);
    const std::string twice =
        error_of([&] { api->recv(buffer.narrow(0, 1, 2), 0, quiet, other_stream); });
    EXPECT_TRUE(contains(twice, "posts a receive on 'quiet' (world ranks")) << twice;
    EXPECT_TRUE(contains(twice, "over memory that its receive #1 from rank 0")) << twice;
  }
  // A send whose data is written before it is done (rank 1 takes it only after the write: its
  // receive is posted after the barrier, and a synchronous send completes only once matched).
  torch::Tensor data = torch::zeros({4});
  if (me == 0) {
    api->send(data, 1, all, stream);
    data.add_(1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    const std::unique_ptr<nccl::Event> sent = api->record(stream);
    const std::string written = error_of([&] {
      while (!sent->done()) {
      }
    });
    EXPECT_TRUE(contains(written, "rank 0 wrote into the data of its send #1 to rank 1 on 'all'"))
        << written;
  } else if (me == 1) {
    api->recv(torch::empty({4}), 0, all, stream);
    const std::unique_ptr<nccl::Event> received = api->record(stream);
    while (!received->done()) {
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Members that split for different channels (what a rank skipping a split leads to) are told so
// at once instead of hanging.
TEST(NcclRules, SplitsForDifferentChannelsAreRefused) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::unique_ptr<nccl::Api> api = nccl::make_emulated_api(20);
  const nccl::Comm all = api->init(MPI_COMM_WORLD, "all");
  const std::string label = world_rank() == 0 ? "channel 0->1" : "channel 1->0";
  const std::string error = error_of([&] { api->split(all, -1, world_rank(), label); });
  EXPECT_TRUE(contains(error, "NCCL rule broken: the members of 'all'")) << error;
  EXPECT_TRUE(contains(error, "disagree on a split")) << error;
  EXPECT_TRUE(contains(error, world_rank() == 0 ? "for channel 1->0" : "for channel 0->1"))
      << error;
}

// The gradient all-reduce over the emulation sums in place.
TEST(NcclEmulation, AllReduceSumsOverTheMembers) {
  std::unique_ptr<nccl::Communicators> comms = emulated(20);
  std::unique_ptr<mr::ReplicaReducer> reducer = mr::make_nccl_reducer(*comms);
  // The replica group of these communicators is MPI_COMM_SELF: the sum is the buffer itself.
  torch::Tensor buffer = torch::arange(5, torch::kFloat);
  reducer->start(buffer)->wait(20, "for the all-reduce");
  EXPECT_TRUE(torch::equal(buffer, torch::arange(5, torch::kFloat)));
  std::unique_ptr<nccl::Communicators> world = std::make_unique<nccl::Communicators>(
      nccl::make_emulated_api(20), MPI_COMM_SELF, MPI_COMM_WORLD, 20);
  torch::Tensor ranks = torch::full({3}, static_cast<double>(world_rank()), torch::kDouble);
  mr::make_nccl_reducer(*world)->start(ranks)->wait(20, "for the all-reduce");
  const double P = world_size();
  EXPECT_DOUBLE_EQ(ranks[2].item<double>(), P * (P - 1) / 2);
}
