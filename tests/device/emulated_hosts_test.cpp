// The testing mode that lets ranks sharing one GPU use NCCL: each rank poses as a host of
// its own, so every transport choice sees GPUs of their own.
#include "device/emulated_hosts.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <map>
#include <set>

#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::device {
namespace {

TEST(EmulatedHosts, OffUnlessSetToOneAndBadValuesNameTheVariable) {
  unsetenv("PIPETRAIN_EMULATED_HOSTS");
  EXPECT_FALSE(emulated_hosts());
  setenv("PIPETRAIN_EMULATED_HOSTS", "0", 1);
  EXPECT_FALSE(emulated_hosts());
  setenv("PIPETRAIN_EMULATED_HOSTS", "1", 1);
  EXPECT_TRUE(emulated_hosts());
  setenv("PIPETRAIN_EMULATED_HOSTS", "yes", 1);
  try {
    emulated_hosts();
    ADD_FAILURE() << "no error";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("PIPETRAIN_EMULATED_HOSTS must be 0 or 1"),
              std::string::npos)
        << e.what();
  }
  unsetenv("PIPETRAIN_EMULATED_HOSTS");
}

TEST(EmulatedHosts, EachRankTurnsOffNcclsSameHostPathsUnderAHostIdOfItsOwn) {
  std::set<std::string> host_ids;
  for (int rank = 0; rank < 8; ++rank) {
    std::map<std::string, std::string> env;
    for (const auto& [name, value] : emulated_host_environment(rank)) env[name] = value;
    host_ids.insert(env.at("NCCL_HOSTID"));
    EXPECT_EQ(env.at("NCCL_P2P_DISABLE"), "1");
    EXPECT_EQ(env.at("NCCL_SHM_DISABLE"), "1");
    EXPECT_EQ(env.at("NCCL_IB_DISABLE"), "1");
    EXPECT_EQ(env.at("NCCL_NET"), "Socket");
    EXPECT_EQ(env.at("NCCL_SOCKET_IFNAME"), "lo");
    EXPECT_EQ(env.at("NCCL_NVLS_ENABLE"), "0");
  }
  EXPECT_EQ(host_ids.size(), 8u);
}

TEST(EmulatedHosts, RanksSharingOneGpuThenChooseNcclAt2And4And8Ranks) {
  const std::string bus = "00000000:19:00.0";
  for (int ranks : {2, 4, 8}) {
    std::vector<std::string> shared, emulated;
    for (int rank = 0; rank < ranks; ++rank) {
      unsetenv("NCCL_HOSTID");
      shared.push_back(host_identity() + "/" + bus);
      enter_emulated_host(rank);
      emulated.push_back(host_identity() + "/" + bus);
    }
    EXPECT_EQ(comm::choose_transport(shared, true), comm::Transport::kMpi) << ranks;
    EXPECT_EQ(comm::choose_transport(emulated, true), comm::Transport::kNccl) << ranks;
    const auto pairs = comm::pair_transports(emulated, true);
    EXPECT_EQ(std::count(pairs.begin(), pairs.end(), comm::Transport::kNccl), ranks - 1);
  }
  EXPECT_EQ(host_identity(), "pipetrain-emulated-host-7");
  unsetenv("NCCL_HOSTID");
}

}  // namespace
}  // namespace pipetrain::device
