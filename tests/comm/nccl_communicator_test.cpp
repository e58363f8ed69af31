// The NCCL communicator against MPI, on one GPU shared by every rank as emulated hosts
// (label gpu, run by scripts/device-check with PIPETRAIN_EMULATED_HOSTS=1; skipped without
// a GPU): every op x dtype x contiguity x reduce op gives MPI's result; an op started on a
// bare thread that never set a device, and one waited for on another thread than the one
// that started it; a send whose source is freed and overwritten while its receiver waits.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <thread>

#include "comm/nccl_communicator.h"
#include "device/cuda.h"
#include "device/emulated_hosts.h"
#include "device/placement.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/device/transport.h"

namespace pipetrain::comm {
namespace {

struct NcclSetup {
  std::shared_ptr<MpiCommunicator> world = MpiCommunicator::world();
  at::Device device = at::kCPU;
  std::shared_ptr<Communicator> nccl;
};

// Null (and the test skipped) without a GPU and emulated hosts.
const NcclSetup* setup() {
  static NcclSetup* made = [] {
    auto* s = new NcclSetup;
    if (device::visible_gpus() == 0) return s;
    s->device = device::place_rank(device::DeviceKind::kCuda, *s->world);
    s->nccl = device::communicator_for(s->world, s->device);
    return s;
  }();
  return made;
}

#define NCCL_OR_SKIP()                              \
  const NcclSetup* s = setup();                     \
  if (!s->nccl) GTEST_SKIP() << "skipped: no GPU";  \
  ASSERT_EQ(s->nccl->transport(), Transport::kNccl) \
      << "ranks sharing a GPU need PIPETRAIN_EMULATED_HOSTS=1 to take NCCL"

at::Tensor values(at::ScalarType dtype, int rank, bool contiguous) {
  at::Tensor t = (at::arange(24, at::kDouble).reshape({4, 6}) * (rank + 1) - 7 * rank).to(dtype);
  return contiguous ? t : t.t();  // 6 x 4, a transposed view
}

TEST(NcclCommunicator, EveryOpDtypeContiguityAndReduceOpGivesMpisResult) {
  NCCL_OR_SKIP();
  const int rank = s->world->rank();
  for (const at::ScalarType dtype :
       {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kInt, at::kLong, at::kChar}) {
    for (const bool contiguous : {true, false}) {
      SCOPED_TRACE(std::string(at::toString(dtype)) + (contiguous ? "" : ", transposed"));
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAverage}) {
        if (op == ReduceOp::kAverage && !at::isFloatingType(dtype)) continue;
        if (dtype == at::kChar && op == ReduceOp::kSum) continue;  // overflows differently
        at::Tensor cpu = values(dtype, rank, contiguous).clone();
        at::Tensor gpu = values(dtype, rank, contiguous).to(s->device);
        if (!contiguous) {
          cpu = values(dtype, rank, false);
          gpu = values(dtype, rank, true).to(s->device).t();
        }
        s->world->all_reduce(cpu, op);
        s->nccl->all_reduce(gpu, op);
        // Sums and maxima exactly as over MPI (half and bf16 too: both reduce in fp32 and
        // round once); averages up to their last division's rounding.
        if (op == ReduceOp::kAverage) {
          EXPECT_TRUE(at::allclose(gpu.cpu().to(at::kDouble), cpu.to(at::kDouble), 1e-2, 1e-2))
              << "all_reduce average";
        } else {
          EXPECT_TRUE(at::equal(gpu.cpu(), cpu)) << "all_reduce " << static_cast<int>(op);
        }
      }
      const at::Tensor mine = values(dtype, rank, contiguous);
      EXPECT_TRUE(
          at::equal(s->nccl->all_gather(mine.to(s->device)).cpu(), s->world->all_gather(mine)));
      at::Tensor cpu_b = values(dtype, rank, contiguous).clone(), gpu_b = cpu_b.to(s->device);
      s->world->broadcast(cpu_b, 1);
      s->nccl->broadcast(gpu_b, 1);
      EXPECT_TRUE(at::equal(gpu_b.cpu(), cpu_b));
      const at::Tensor flat = values(dtype, rank, true).reshape({-1}).repeat({s->world->size()});
      EXPECT_TRUE(at::equal(s->nccl->reduce_scatter(flat.to(s->device), ReduceOp::kMax).cpu(),
                            s->world->reduce_scatter(flat, ReduceOp::kMax)));
      at::Tensor blocks = at::zeros({4 * s->world->size()}, dtype);
      blocks.narrow(0, 4 * rank, 4).fill_(rank + 1);
      at::Tensor gpu_blocks = blocks.to(s->device);
      s->world->all_gather_in_place(blocks);
      s->nccl->all_gather_in_place(gpu_blocks);
      EXPECT_TRUE(at::equal(gpu_blocks.cpu(), blocks));
    }
  }
}

TEST(NcclCommunicator, SendsAndReceivesAroundTheRing) {
  NCCL_OR_SKIP();
  const int rank = s->world->rank(), size = s->world->size();
  const at::Tensor out = values(at::kFloat, rank, true).to(s->device);
  at::Tensor in = at::empty_like(out);
  // Even ranks send first, odd ones receive first: matched by order, no cycle.
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  if (rank % 2 == 0) {
    s->nccl->send(out, next, 1)->wait();
    s->nccl->recv(in, previous, 1)->wait();
  } else {
    s->nccl->recv(in, previous, 1)->wait();
    s->nccl->send(out, next, 1)->wait();
  }
  EXPECT_TRUE(at::equal(in.cpu(), values(at::kFloat, previous, true)));
}

// One NCCL group of sends and receives: rank r sends rank q (r + 1) x (q + 1) rows of
// r * 100 + q, none to the rank after it (an empty exchange is skipped); the same as MPI's
// exchange, which is what was sent.
TEST(NcclCommunicator, AllToAllGivesMpisResult) {
  NCCL_OR_SKIP();
  const int rank = s->world->rank(), size = s->world->size();
  auto rows = [&](int from, int to) { return to == (from + 1) % size ? 0 : (from + 1) * (to + 1); };
  auto exchange = [&](Communicator& comm, at::Device device) {
    std::vector<at::Tensor> outgoing, incoming;
    for (int q = 0; q < size; ++q) {
      outgoing.push_back(at::full({rows(rank, q), 3}, rank * 100 + q, at::kFloat).to(device));
      incoming.push_back(
          at::empty({rows(q, rank), 3}, at::TensorOptions(at::kFloat).device(device)));
    }
    comm.all_to_all(outgoing, incoming, 7);
    return at::cat(incoming).cpu();
  };
  const at::Tensor over_nccl = exchange(*s->nccl, s->device);
  const at::Tensor over_mpi = exchange(*s->world, at::kCPU);
  std::vector<at::Tensor> expected;
  for (int q = 0; q < size; ++q) expected.push_back(at::full({rows(q, rank), 3}, q * 100 + rank));
  EXPECT_TRUE(at::equal(over_mpi, at::cat(expected)));
  EXPECT_TRUE(at::equal(over_nccl, over_mpi));
}

TEST(NcclCommunicator, AnOpStartedOnABareThreadThatNeverSetADevice) {
  NCCL_OR_SKIP();
  at::Tensor t = at::ones({1000}, at::TensorOptions(at::kFloat).device(s->device));
  std::thread bare([&] {  // its current device is 0, whatever this rank's is
    s->nccl->all_reduce_async(t, ReduceOp::kSum)->wait();
  });
  bare.join();
  EXPECT_EQ(t.cpu()[0].item<float>(), static_cast<float>(s->world->size()));
}

TEST(NcclCommunicator, StartedOnOneThreadAndWaitedForOnAnother) {
  NCCL_OR_SKIP();
  at::Tensor t = at::full({1 << 16}, 2.0f, at::TensorOptions(at::kFloat).device(s->device));
  WorkPtr work;
  std::thread starter([&] { work = s->nccl->all_reduce_async(t, ReduceOp::kSum); });
  starter.join();
  // Read on a stream of its own: only wait()'s ordering makes the sum visible there.
  const c10::cuda::CUDAStreamGuard other(c10::cuda::getStreamFromPool(false, s->device.index()));
  work->wait();
  EXPECT_EQ(t.sum().item<float>(), 2.0f * s->world->size() * (1 << 16));
}

TEST(NcclCommunicator, AStreamOrderedCollectiveIsThereForTheCallersStream) {
  NCCL_OR_SKIP();
  const c10::cuda::CUDAStreamGuard other(c10::cuda::getStreamFromPool(false, s->device.index()));
  at::Tensor t = at::full({1 << 20}, 1.0f, at::TensorOptions(at::kFloat).device(s->device));
  for (int k = 0; k < 3; ++k) s->nccl->all_reduce(t, ReduceOp::kSum);  // the host goes on
  const double n = s->world->size();
  EXPECT_EQ(t.max().item<float>(), static_cast<float>(n * n * n));
}

TEST(NcclCommunicator, ASendWhoseSourceIsFreedAndOverwrittenWhileTheReceiverWaits) {
  NCCL_OR_SKIP();
  if (s->world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int rank = s->world->rank();
  const auto options = at::TensorOptions(at::kFloat).device(s->device);
  if (rank == 0) {
    WorkPtr sent;
    {
      at::Tensor source = at::full({1 << 20}, 42.0f, options);
      sent = s->nccl->send(source, 1, 7);
    }  // freed: the allocator must not hand its memory out before the send is done
    for (int k = 0; k < 8; ++k) at::full({1 << 20}, -1.0f, options);
    sent->wait();
  } else if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    at::Tensor received = at::empty({1 << 20}, options);
    s->nccl->recv(received, 0, 7)->wait();
    EXPECT_EQ(received.min().item<float>(), 42.0f);
    EXPECT_EQ(received.max().item<float>(), 42.0f);
  }
  s->world->barrier();
}

TEST(NcclCommunicator, TheEmulatedHostsAreWhatTheTransportChoiceSaw) {
  NCCL_OR_SKIP();
  EXPECT_TRUE(device::emulated_hosts());
  EXPECT_EQ(device::host_identity(), "pipetrain-emulated-host-" + std::to_string(s->world->rank()));
}

}  // namespace
}  // namespace pipetrain::comm
