#include "pipetrain/device/transport.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "comm/nccl_communicator.h"
#include "device/cuda.h"

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

namespace {

// One lane's communicator between the two ranks of `two`: NCCL with a stream of its own, or
// (tests) an MPI communicator of its own.
std::shared_ptr<comm::Communicator> lane_communicator(
    const std::shared_ptr<comm::MpiCommunicator>& two, comm::Transport transport,
    at::Device device) {
  if (transport != comm::Transport::kNccl) {
    auto own = two->split(0, two->rank());
    own->set_timeout(two->timeout());
    return own;
  }
  auto made = comm::make_nccl_communicator(two, device.index(), comm::NcclStream::kOwn);
  if (!made) throw std::logic_error("NCCL chosen for a pipe lane in a build without it");
  made->set_timeout(two->timeout());
  return made;
}

// NCCL connects two ranks on their first transfer, and a blocking communicator's first send
// waits on the host for that; ranks whose first sends cross would each wait in their own.
// One transfer over each lane, in the lanes' order on both ranks, connects them all now.
void connect(const std::vector<schedule::PipeLane>& lanes, const PipeLink& link, int stage,
             at::Device device) {
  at::Tensor token = at::zeros({1}, at::TensorOptions(at::kFloat).device(device));
  for (const schedule::PipeLane& lane : lanes) {
    const bool sends = lane.from == stage;
    auto& way = sends ? link.to.at(tag_of(lane)) : link.from.at(tag_of(lane));
    (sends ? way->send(token, link.rank_there, 0) : way->recv(token, link.rank_there, 0))->wait();
  }
}

}  // namespace

std::map<int, PipeLink> pipe_links(const std::shared_ptr<comm::MpiCommunicator>& pipe,
                                   at::Device device, const std::vector<schedule::PipeLane>& lanes,
                                   bool own_lanes) {
  const int stage = pipe->rank();
  const std::string mine = device.is_cuda() ? gpu_identity(device.index()) : std::string();
  const auto gpus = comm::all_gather_text(*pipe, mine);
  // The pairs of stages the lanes join, in one order on every rank: each split off the pipe
  // (collective over it) and its communicators made (collective over the two) in this order,
  // so NCCL's set-ups, which block, meet in one order.
  std::map<std::pair<int, int>, std::vector<schedule::PipeLane>> pairs;
  for (const schedule::PipeLane& lane : lanes)
    pairs[std::minmax(lane.from, lane.to)].push_back(lane);
  std::map<int, PipeLink> links;
  for (const auto& [pair, joined] : pairs) {
    const bool member = pair.first == stage || pair.second == stage;
    const auto two = pipe->split(member ? 0 : 1 + stage, stage);  // collective over the pipe
    if (!member) continue;
    const int peer = pair.first == stage ? pair.second : pair.first;
    PipeLink& link = links[peer];
    link.transport =
        comm::choose_transport({gpus[pair.first], gpus[pair.second]}, comm::nccl_compiled());
    link.rank_there = peer > stage ? 1 : 0;
    if (link.transport != comm::Transport::kNccl && !own_lanes) continue;
    two->set_timeout(pipe->timeout());
    for (const schedule::PipeLane& lane : joined)
      (lane.from == stage ? link.to : link.from)[tag_of(lane)] =
          lane_communicator(two, link.transport, device);
    if (link.transport == comm::Transport::kNccl) connect(joined, link, stage, device);
  }
  return links;
}

}  // namespace pipetrain::device
