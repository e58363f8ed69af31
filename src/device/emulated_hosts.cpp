#include "device/emulated_hosts.h"

#include <unistd.h>

#include <array>
#include <cstdlib>

#include "pipetrain/io/errors.h"

namespace pipetrain::device {

bool emulated_hosts() {
  const char* text = std::getenv("PIPETRAIN_EMULATED_HOSTS");
  const std::string value = text ? text : "";
  if (value.empty() || value == "0") return false;
  if (value == "1") return true;
  throw io::InputError(
      "PIPETRAIN_EMULATED_HOSTS must be 0 or 1 (a testing mode: ranks sharing "
      "a GPU use NCCL as emulated hosts), got '" +
      value + "'");
}

std::vector<std::pair<std::string, std::string>> emulated_host_environment(int global_rank) {
  return {
      {"NCCL_HOSTID", "pipetrain-emulated-host-" + std::to_string(global_rank)},
      {"NCCL_P2P_DISABLE", "1"},
      {"NCCL_SHM_DISABLE", "1"},
      {"NCCL_IB_DISABLE", "1"},
      {"NCCL_NET", "Socket"},
      {"NCCL_SOCKET_IFNAME", "lo"},
      {"NCCL_NVLS_ENABLE", "0"},
  };
}

void enter_emulated_host(int global_rank) {
  for (const auto& [name, value] : emulated_host_environment(global_rank))
    setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
}

std::string host_identity() {
  if (const char* id = std::getenv("NCCL_HOSTID"); id && *id) return id;
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  return host.data();
}

}  // namespace pipetrain::device
