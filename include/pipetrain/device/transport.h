#pragma once

#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <vector>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/comm/transport_choice.h"
#include "pipetrain/schedule/pipe_lanes.h"

namespace pipetrain::device {

// The communicator for tensors on `device` among `group`'s ranks, by choose_transport:
// an NCCL communicator over the same ranks, or `group` itself (MPI). Collective.
std::shared_ptr<comm::Communicator> communicator_for(
    const std::shared_ptr<comm::MpiCommunicator>& group, at::Device device);

// The tag a lane's transfers carry (comm::kEveryTag: all of its pair's, a lane without a
// channel).
inline int tag_of(const schedule::PipeLane& lane) {
  return lane.channel ? lane.channel->tag() : comm::kEveryTag;
}

// How payloads travel between this rank and one stage it exchanges them with.
struct PipeLink {
  comm::Transport transport = comm::Transport::kMpi;
  // Over NCCL, a communicator per lane, each with a stream of its own (a send queued on one
  // lane never waits behind a receive queued on another): `to` by tag for what this rank
  // sends the peer, `from` for what it receives. Empty for MPI (the pipe's communicator
  // carries them, matched by tag).
  std::map<int, std::shared_ptr<comm::Communicator>> to{}, from{};
  int rank_there = 0;  // the peer's rank in each
};

// The links to the stages this rank shares a lane with, in `pipe` (ranked by stage): NCCL
// between two stages on GPUs of their own (comm::choose_transport), one communicator per
// lane; MPI (with host staging) between stages that share a GPU or sit on the CPU.
// Collective over `pipe`; every rank passes the same `lanes`. With `own_lanes` (tests),
// every lane gets a communicator of its own, MPI where NCCL is not chosen, so payloads
// travel apart from headers everywhere.
std::map<int, PipeLink> pipe_links(const std::shared_ptr<comm::MpiCommunicator>& pipe,
                                   at::Device device, const std::vector<schedule::PipeLane>& lanes,
                                   bool own_lanes = false);

}  // namespace pipetrain::device
