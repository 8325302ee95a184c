// Run under mpirun -np 2..4: when an error unwinds the runtime's objects, no destructor waits on
// a transfer or frees an active collective, so that the rank reaches its abort at once; what the
// transfer still reads or writes stays alive, so that the peer's side completes correctly.

#include "core/error.hpp"
#include "runtime/mpi/mpi_test_support.hpp"
#include "runtime/mpi_session.hpp"
#include "runtime/replicas.hpp"
#include "runtime/transport.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

namespace mr = madpipe::runtime;

using namespace madpipe::testing;

namespace {
// Generous: only there so that a destructor that waits fails the test instead of hanging it.
constexpr double kHangGuardSeconds = 60;
constexpr int kSignalTag = 4242;

void signal_peer(int peer) {
  int token = 1;
  MPI_Send(&token, 1, MPI_INT, peer, kSignalTag, MPI_COMM_WORLD);
}

void await_signal(int peer, const std::string& what) {
  int token = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Irecv(&token, 1, MPI_INT, peer, kSignalTag, MPI_COMM_WORLD, &request);
  mr::wait_with_deadline(request, kHangGuardSeconds, world_rank(), what);
}
}  // namespace

// Rank 0 sends 4 MiB (beyond any eager limit: the send completes only once rank 1 receives) and
// fails before rank 1 posts its receive. Rank 1 posts it only when rank 0 has left the
// transport's destructor, which therefore must not wait for the send.
TEST(ErrorUnwinding, TransportDestructorDoesNotWaitForSends) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = world_rank();
  const mr::MessageKey key{mr::Direction::Activation, 0, 0, 0};
  const torch::Tensor sent = torch::arange(1 << 20, torch::kFloat32);
  if (rank == 0) {
    try {
      std::unique_ptr<mr::Transport> transport = mr::make_mpi_transport(1, /*timeout_s=*/0);
      transport->post_send(1, key, sent);
      throw std::runtime_error("stage 0 failed");
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "stage 0 failed");
    }
    signal_peer(1);
  } else if (rank == 1) {
    ASSERT_NO_THROW(await_signal(0, "for rank 0 to leave the transport's destructor"));
    std::unique_ptr<mr::Transport> transport = mr::make_mpi_transport(1, kHangGuardSeconds);
    transport->post_recv(0, key, torch::empty({1 << 20}, torch::kFloat32));
    const torch::Tensor received = transport->wait_recv(0, key);
    EXPECT_TRUE(torch::equal(received, sent)) << "the abandoned send's buffer was released";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 0 starts a gradient all-reduce and fails before the other replicas join: the averager's
// destructor must neither free the active collective (MPI forbids it; Open MPI aborts the job)
// nor release its buffer, whose sum the others still receive.
TEST(ErrorUnwinding, AveragerDestructorLeavesAnActiveAllReduceAlone) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = world_rank();
  const int D = world_size();
  const mr::ReplicaGroups groups(mr::replica_layout(rank, D, D));
  torch::Tensor w = torch::zeros({4}, torch::requires_grad());
  w.mutable_grad() = torch::full({4}, static_cast<float>(rank));
  if (rank == 0) {
    try {
      mr::GradientAverager averager(groups.replicas(), D, 1, 1);
      averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w}; });
      throw std::runtime_error("stage 0 failed");
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "stage 0 failed");
    }
    for (int peer = 1; peer < D; ++peer) signal_peer(peer);
  } else {
    ASSERT_NO_THROW(await_signal(0, "for rank 0 to leave the averager's destructor"));
    mr::GradientAverager averager(groups.replicas(), D, 1, 1);
    averager.set_timeout(kHangGuardSeconds);
    averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w}; });
    averager.finish();
    EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), (D - 1) / 2.0f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
