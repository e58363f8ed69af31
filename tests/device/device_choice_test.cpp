// Which device a rank takes and which transport a group uses: decided without a GPU.
#include "pipetrain/device/device_choice.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::device {
namespace {

using comm::choose_transport;
using comm::Transport;

TEST(ChooseGpu, RanksTakeTheVisibleGpusInTurn) {
  EXPECT_EQ(choose_gpu(DeviceKind::kCuda, 0, 4, true), 0);
  EXPECT_EQ(choose_gpu(DeviceKind::kCuda, 5, 4, true), 1);
  EXPECT_EQ(choose_gpu(DeviceKind::kAuto, 3, 2, true), 1);
  EXPECT_EQ(choose_gpu(DeviceKind::kCuda, 3, 1, true), 0);  // all share the one GPU
}

TEST(ChooseGpu, CpuAndAutoWithoutAGpuStayOnTheCpu) {
  EXPECT_EQ(choose_gpu(DeviceKind::kCpu, 0, 8, true), -1);
  EXPECT_EQ(choose_gpu(DeviceKind::kAuto, 0, 0, true), -1);
  EXPECT_EQ(choose_gpu(DeviceKind::kAuto, 0, 2, false), -1);  // a CPU build ignores GPUs
}

TEST(ChooseGpu, CudaWithoutAGpuIsBadInputSayingWhy) {
  try {
    choose_gpu(DeviceKind::kCuda, 0, 0, true);
    FAIL() << "no error";
  } catch (const io::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "device \"cuda\": no GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  try {
    choose_gpu(DeviceKind::kCuda, 0, 1, false);
    FAIL() << "no error";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
  }
}

TEST(LocalRank, LaunchersVariablesComeBeforeTheFallback) {
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
  unsetenv("MPI_LOCALRANKID");
  EXPECT_EQ(local_rank_from_environment(7), 7);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(local_rank_from_environment(7), 3);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  EXPECT_EQ(local_rank_from_environment(7), 2);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);  // unreadable: the next one
  EXPECT_EQ(local_rank_from_environment(7), 3);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
}

TEST(ChooseTransport, NcclOnlyBetweenGpusOfTheirOwn) {
  EXPECT_EQ(choose_transport({"a/0000:01:00.0", "a/0000:02:00.0"}, true), Transport::kNccl);
  EXPECT_EQ(choose_transport({"a/0000:01:00.0", "b/0000:01:00.0"}, true), Transport::kNccl);
  // Two ranks on one GPU: NCCL would refuse ("Duplicate GPU detected").
  EXPECT_EQ(choose_transport({"a/0000:01:00.0", "a/0000:01:00.0"}, true), Transport::kMpi);
  EXPECT_EQ(choose_transport({"a/0000:01:00.0", ""}, true), Transport::kMpi);  // one on the CPU
  EXPECT_EQ(choose_transport({"", ""}, true), Transport::kMpi);
  EXPECT_EQ(choose_transport({"a/0000:01:00.0", "a/0000:02:00.0"}, false), Transport::kMpi);
  EXPECT_EQ(choose_transport({"a/0000:01:00.0"}, true), Transport::kMpi);  // a group of one
  EXPECT_EQ(comm::transport_name(Transport::kNccl), "nccl");
  EXPECT_EQ(comm::transport_name(Transport::kMpi), "mpi");
}

TEST(PairTransports, EachPairOfNeighbouringStagesChoosesForItself) {
  using V = std::vector<Transport>;
  const std::string a = "h/0000:01:00.0", b = "h/0000:02:00.0";
  // Four stages on two GPUs in turn (local rank % GPUs): neighbours never share one.
  EXPECT_EQ(comm::pair_transports({a, b, a, b}, true),
            (V{Transport::kNccl, Transport::kNccl, Transport::kNccl}));
  // Two stages per GPU: only the pair across the GPUs can use NCCL.
  EXPECT_EQ(comm::pair_transports({a, a, b, b}, true),
            (V{Transport::kMpi, Transport::kNccl, Transport::kMpi}));
  EXPECT_EQ(comm::pair_transports({a, "", b}, true), (V{Transport::kMpi, Transport::kMpi}));
  EXPECT_EQ(comm::pair_transports({a, b}, false), V{Transport::kMpi});  // no NCCL built
  EXPECT_EQ(comm::pair_transports({a}, true), V{});                     // one stage, no pairs
}

}  // namespace
}  // namespace pipetrain::device
