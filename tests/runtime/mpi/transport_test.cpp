// Run under mpirun -np 1..4. What the transports guarantee:
// * what a CPU can check of the GPU paths: one GPU per process or a refusal naming both counts,
//   which transport a run gets, the per-channel order an ordered transport (NCCL) relies on,
//   gradient buckets; and, where a GPU is present, NCCL itself;
// * when an error unwinds the runtime's objects, no destructor waits on a transfer or frees an
//   active collective, so that the rank reaches its abort at once; what the transfer still reads
//   or writes stays alive, so that the peer's side completes correctly.

#include "runtime/comm/transport.hpp"

#include "core/error.hpp"
#include "runtime/comm/channel_order.hpp"
#include "runtime/comm/mpi_session.hpp"
#include "runtime/comm/nccl.hpp"
#include "runtime/comm/replicas.hpp"
#include "runtime/device/device.hpp"
#include "runtime/mpi/mpi_test_support.hpp"

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <mpi.h>

namespace mr = madpipe::runtime;

using namespace madpipe::testing;

namespace {
bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const torch::Device kGpu0(torch::kCUDA, 0);  // a device name: no GPU is needed to hold one
}  // namespace

TEST(GpuBinding, OneGpuPerProcessOrARefusalNamingBothCounts) {
  EXPECT_EQ(mr::gpu_of_local_rank(0, 4, 4), 0);
  EXPECT_EQ(mr::gpu_of_local_rank(3, 4, 8), 3);
  const std::string refusal = error_of([] { mr::gpu_of_local_rank(2, 3, 2); });
  EXPECT_TRUE(contains(refusal, "3 processes on this node see the same 2 GPUs")) << refusal;
  EXPECT_TRUE(contains(refusal, "--gpus-per-task=1")) << refusal;
  EXPECT_TRUE(contains(refusal, "cuda:N")) << refusal;
  EXPECT_TRUE(contains(error_of([] { mr::gpu_of_local_rank(1, 2, 1); }), "see the same 1 GPU "));
}

// Slurm's --gpus-per-task=1 gives each task one GPU of its own, numbered 0: processes are grouped
// by what CUDA_VISIBLE_DEVICES shows them, and each is rank 0 of its own group.
TEST(GpuBinding, ProcessesAreGroupedByTheGpusTheySee) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* before = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = before == nullptr ? "" : before;
  setenv("CUDA_VISIBLE_DEVICES", std::to_string(rank).c_str(), 1);
  const mr::LocalGroup own = mr::processes_seeing_the_same_gpus();
  EXPECT_EQ(own.rank, 0);
  EXPECT_EQ(own.size, 1);
  EXPECT_EQ(mr::gpu_of_local_rank(own.rank, own.size, 1), 0);
  setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);  // one list for the node: one GPU of it each
  const mr::LocalGroup shared = mr::processes_seeing_the_same_gpus();
  EXPECT_EQ(shared.rank, rank);  // every test rank runs on this machine
  EXPECT_EQ(shared.size, size);
  if (before == nullptr)
    unsetenv("CUDA_VISIBLE_DEVICES");
  else
    setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
}

TEST(TransportChoice, AutoIsNcclOnlyWithAGpuPerRankAndNcclBuiltIn) {
  using K = mr::TransportKind;
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cpu", torch::kCPU, 4, true), K::Mpi);
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cuda", kGpu0, 4, true), K::Nccl);
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cuda", kGpu0, 4, false), K::Mpi);
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cuda:0", kGpu0, 4, true), K::Mpi);  // shared GPU
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cuda:0", kGpu0, 1, true), K::Nccl);
  EXPECT_EQ(mr::resolve_transport(K::Mpi, "cuda", kGpu0, 4, true), K::Mpi);
  EXPECT_EQ(mr::resolve_transport(K::Nccl, "cuda", kGpu0, 2, true), K::Nccl);
}

TEST(TransportChoice, NcclIsRefusedOnTheCpuOnASharedGpuAndWhenNotBuiltIn) {
  using K = mr::TransportKind;
  const std::string on_cpu =
      error_of([] { mr::resolve_transport(K::Nccl, "cpu", torch::kCPU, 1, true); });
  EXPECT_TRUE(contains(on_cpu, "transport")) << on_cpu;
  EXPECT_TRUE(contains(on_cpu, "--device is cpu")) << on_cpu;
  const std::string shared =
      error_of([] { mr::resolve_transport(K::Nccl, "cuda:0", kGpu0, 2, true); });
  EXPECT_TRUE(contains(shared, "puts the node's 2 processes on it")) << shared;
  const std::string missing =
      error_of([] { mr::resolve_transport(K::Nccl, "cuda", kGpu0, 1, false); });
  EXPECT_TRUE(contains(missing, "not built in")) << missing;
  // The emulation allows it, for tests only.
  EXPECT_EQ(mr::resolve_transport(K::Nccl, "cpu", torch::kCPU, 4, false, true), K::Nccl);
  EXPECT_EQ(mr::resolve_transport(K::Auto, "cpu", torch::kCPU, 4, false, true), K::Mpi);
  // The communicators themselves refuse a CPU device unless the emulation is asked for, with or
  // without NCCL in the build.
  const char* asked = std::getenv("MADPIPE_NCCL_EMULATION");
  const std::string saved = asked ? asked : "";
  ::unsetenv("MADPIPE_NCCL_EMULATION");
  const std::string communicators =
      error_of([] { mr::make_nccl_communicators(MPI_COMM_WORLD, MPI_COMM_WORLD, torch::kCPU, 0); });
  if (asked) ::setenv("MADPIPE_NCCL_EMULATION", saved.c_str(), 1);
  EXPECT_TRUE(contains(communicators, "transport")) << communicators;
  EXPECT_TRUE(contains(communicators, "use --transport mpi")) << communicators;
}

TEST(ChannelOrder, EachChannelTakesItsMessagesInTheProgramsOrder) {
  using D = mr::Direction;
  mr::ChannelOrder order;
  order.send(1, {D::Activation, 0, 0, 0});
  order.send(1, {D::Activation, 0, 1, 1});
  order.send(2, {D::Gradient, 3, 0, 0});  // another peer: its own numbering
  order.receive(1, {D::Gradient, 1, 0, 0});
  const std::string skipped = error_of([&] { order.send(1, {D::Activation, 0, 3, 3}); });
  EXPECT_TRUE(contains(skipped,
                       "send to rank 1: the activation of stage 0, micro-batch 3 "
                       "carries sequence number 3 but the channel's next is 2"))
      << skipped;
  const std::string repeated = error_of([&] { order.receive(1, {D::Gradient, 1, 0, 0}); });
  EXPECT_TRUE(contains(repeated, "receive from rank 1")) << repeated;
  order.restart();  // the next program run numbers from 0 again
  EXPECT_NO_THROW(order.send(1, {D::Activation, 0, 0, 0}));
  EXPECT_NO_THROW(order.receive(1, {D::Gradient, 1, 0, 0}));
}

TEST(GradientBuckets, ConsecutiveParametersUpToTheCapAndABigOneAlone) {
  using B = std::vector<std::pair<int, int>>;
  auto ranges = [](const std::vector<mr::GradientBucket>& buckets) {
    B out;
    for (const auto& b : buckets) out.emplace_back(b.first, b.last);
    return out;
  };
  EXPECT_EQ(ranges(mr::gradient_buckets({4, 4, 4, 4}, 8)), (B{{0, 2}, {2, 4}}));
  EXPECT_EQ(ranges(mr::gradient_buckets({4, 20, 4}, 8)), (B{{0, 1}, {1, 2}, {2, 3}}));
  EXPECT_EQ(ranges(mr::gradient_buckets({1, 2, 3}, 100)), (B{{0, 3}}));
  EXPECT_TRUE(mr::gradient_buckets({}, 8).empty());
}

// Buckets of 16 bytes: w (4 floats) and v (3 floats) go in two all-reduces, both averaged.
TEST(GradientBuckets, EachBucketIsAveragedOverTheReplicas) {
  const int D = world_size();
  const mr::ReplicaGroups groups(mr::replica_layout(world_rank(), D, D));
  torch::Tensor w = torch::zeros({4}, torch::requires_grad());
  torch::Tensor v = torch::zeros({3}, torch::requires_grad());
  w.mutable_grad() = torch::full({4}, static_cast<float>(world_rank()));
  v.mutable_grad() = torch::full({3}, 2.0f * world_rank());
  mr::GradientAverager averager(mr::make_mpi_reducer(groups.replicas()), D, 1, 1, 16);
  averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w, v}; });
  EXPECT_EQ(averager.pending(), D > 1 ? 2 : 0);
  averager.finish();
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), (D - 1) / 2.0f);
  EXPECT_FLOAT_EQ(v.grad()[2].item<float>(), static_cast<float>(D - 1));
}

// Bound gradients are views of one buffer per bucket, summed in place: no gradient is copied, and
// a gradient replaced since the binding falls back to the copying path.
TEST(GradientBuckets, BoundGradientsAreSummedInPlace) {
  const int D = world_size();
  if (D < 2) GTEST_SKIP() << "needs 2 replicas";
  const mr::ReplicaGroups groups(mr::replica_layout(world_rank(), D, D));
  torch::Tensor w = torch::zeros({4}, torch::requires_grad());
  torch::Tensor v = torch::zeros({3}, torch::requires_grad());
  mr::GradientAverager averager(mr::make_mpi_reducer(groups.replicas()), D, 1, 1, 16);
  averager.bind_gradients(0, {w, v});
  const void* w_storage = w.grad().data_ptr();
  EXPECT_EQ(w.grad().numel(), 4);
  w.mutable_grad().add_(static_cast<float>(world_rank()));  // what backward accumulates
  v.mutable_grad().add_(2.0f * world_rank());
  averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w, v}; });
  EXPECT_EQ(averager.pending(), 2);
  averager.finish();
  EXPECT_EQ(w.grad().data_ptr(), w_storage);  // summed where it is
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), (D - 1) / 2.0f);
  EXPECT_FLOAT_EQ(v.grad()[2].item<float>(), static_cast<float>(D - 1));
  // A new step: zeroed again; a gradient replaced after the binding is still averaged.
  averager.bind_gradients(0, {w, v});
  EXPECT_EQ(w.grad().data_ptr(), w_storage);
  EXPECT_FLOAT_EQ(w.grad().abs().sum().item<float>(), 0.0f);
  v.mutable_grad() = torch::full({3}, 4.0f * world_rank());
  averager.backward_done(0, [&] { return std::vector<torch::Tensor>{w, v}; });
  averager.finish();
  EXPECT_FLOAT_EQ(v.grad()[0].item<float>(), 2.0f * (D - 1));
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), 0.0f);
}

// On a GPU (launch/gpu-check.sh, one rank): a message from the rank to itself over NCCL and an
// all-reduce over the one-rank replica group.
TEST(NcclOnOneGpu, SelfSendReceiveAndAllReduce) {
  if (!torch::cuda::is_available() || !mr::nccl_built()) GTEST_SKIP() << "needs a GPU and NCCL";
  if (world_size() != 1) GTEST_SKIP() << "one rank per GPU: run with -np 1";
  const torch::Device gpu(torch::kCUDA, 0);
  mr::make_current(gpu);
  std::unique_ptr<mr::NcclCommunicators> comms =
      mr::make_nccl_communicators(MPI_COMM_WORLD, MPI_COMM_WORLD, gpu, 60);
  comms->add_channels({{0, 0}});
  std::unique_ptr<mr::Transport> transport = mr::make_nccl_transport(*comms);
  const mr::MessageKey key{mr::Direction::Activation, 0, 0, 0};
  const torch::Tensor sent = torch::arange(1000, torch::TensorOptions(torch::kFloat32).device(gpu));
  transport->post_recv(0, key, torch::empty({1000}, sent.options()));
  transport->post_send(0, key, sent);
  const torch::Tensor received = transport->wait_recv(0, key);
  transport->wait_sends();
  EXPECT_TRUE(torch::equal(received.cpu(), sent.cpu()));

  std::unique_ptr<mr::ReplicaReducer> reducer = mr::make_nccl_reducer(*comms);
  torch::Tensor buffer = sent.clone();
  reducer->start(buffer)->wait(60, "for the all-reduce");
  EXPECT_TRUE(torch::equal(buffer.cpu(), sent.cpu()));  // the sum over one rank
}

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
