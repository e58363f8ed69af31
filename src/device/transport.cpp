#include "pipetrain/device/transport.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "pipetrain/comm/nccl_communicator.h"
#include "pipetrain/device/cuda.h"

namespace pipetrain::device {

std::shared_ptr<comm::Communicator> communicator_for(
    const std::shared_ptr<comm::MpiCommunicator>& group, at::Device device) {
  const std::string mine = device.is_cuda() ? gpu_identity(device.index()) : std::string();
  const auto gpus = comm::all_gather_text(*group, mine);
  if (comm::choose_transport(gpus, comm::nccl_compiled()) == comm::Transport::kNccl) {
    if (auto nccl = comm::make_nccl_communicator(group, device.index())) {
      nccl->set_timeout(group->timeout());
      return nccl;
    }
  }
  return group;
}

std::map<int, NeighbourLink> neighbour_links(const std::shared_ptr<comm::MpiCommunicator>& pipe,
                                             at::Device device, bool own_pairs) {
  const int stage = pipe->rank(), stages = pipe->size();
  const std::string mine = device.is_cuda() ? gpu_identity(device.index()) : std::string();
  const auto pairs =
      comm::pair_transports(comm::all_gather_text(*pipe, mine), comm::nccl_compiled());
  std::map<int, NeighbourLink> links;
  for (const int neighbour : {stage - 1, stage + 1}) {
    if (neighbour >= 0 && neighbour < stages)
      links[neighbour] = {.transport = pairs[std::min(stage, neighbour)],
                          .to = nullptr,
                          .from = nullptr,
                          .rank_there = 0};
  }
  if (!own_pairs && std::find(pairs.begin(), pairs.end(), comm::Transport::kNccl) == pairs.end())
    return links;  // every rank decides alike: no NCCL pair, nothing to split
  // Pair k joins stages k and k + 1. Even pairs are split off first, then odd ones (each
  // stage is in at most one of each), so NCCL's set-ups, which block, meet in one order.
  for (int parity = 0; parity < 2; ++parity) {
    const int k = stage % 2 == parity ? stage : stage - 1;  // this stage's pair of this parity
    const bool paired = k >= 0 && k + 1 < stages;
    const auto two = pipe->split(paired ? k : stages + stage, stage);  // collective
    if (!paired || (pairs[k] != comm::Transport::kNccl && !own_pairs)) continue;
    const int neighbour = k == stage ? stage + 1 : k;
    NeighbourLink& link = links[neighbour];
    two->set_timeout(pipe->timeout());
    if (pairs[k] == comm::Transport::kNccl) {
      // Downstream (stage k to k + 1) first, then upstream: both ranks make them in this order.
      std::shared_ptr<comm::Communicator> made[2];
      for (auto& direction : made) {
        direction = comm::make_nccl_communicator(two, device.index());
        if (!direction) throw std::logic_error("NCCL chosen for a pipe pair in a build without it");
        direction->set_timeout(pipe->timeout());
      }
      const bool lower = k == stage;
      link.to = made[lower ? 0 : 1];
      link.from = made[lower ? 1 : 0];
      // NCCL connects two ranks on their first transfer, and a blocking communicator's
      // first send waits on the host for that; neighbours whose first sends cross would
      // each wait in their own. One transfer each way, downstream first, connects both now.
      at::Tensor token = at::zeros({1}, at::TensorOptions(at::kFloat).device(device));
      for (int direction = 0; direction < 2; ++direction) {
        const bool sends = lower == (direction == 0);
        auto& way = made[direction];
        (sends ? way->send(token, 1 - two->rank(), 0) : way->recv(token, 1 - two->rank(), 0))
            ->wait();
      }
    } else {
      link.to = link.from = two;
    }
    link.rank_there = neighbour > stage ? 1 : 0;
  }
  return links;
}

}  // namespace pipetrain::device
