#include "device/placement.h"

#include <unistd.h>

#include <array>

#include "device/cuda.h"
#include "device/emulated_hosts.h"

namespace pipetrain::device {
namespace {

// Ranks before this one on the same host.
int host_local_rank(comm::Communicator& world) {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  const auto hosts = comm::all_gather_text(world, host.data());
  int local = 0;
  for (int r = 0; r < world.rank(); ++r) local += hosts[r] == hosts[world.rank()] ? 1 : 0;
  return local;
}

}  // namespace

at::Device place_rank(DeviceKind kind, comm::Communicator& world) {
  const bool emulated = emulated_hosts();  // read (and checked) on every rank
  const int local_rank = local_rank_from_environment(host_local_rank(world));
  const int gpu = choose_gpu(kind, local_rank, visible_gpus(), cuda_built());
  if (gpu < 0) return at::kCPU;
  use_gpu(gpu);
  // Before any NCCL call: NCCL reads its environment once, at its first.
  if (emulated) enter_emulated_host(world.global_rank(world.rank()));
  return {at::kCUDA, static_cast<c10::DeviceIndex>(gpu)};
}

std::string describe_device(at::Device device) {
  if (!device.is_cuda()) return "cpu";
  return device.str() + " (" + gpu_name(device.index()) + ")";
}

}  // namespace pipetrain::device
