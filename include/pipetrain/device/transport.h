#pragma once

#include <c10/core/Device.h>

#include <map>
#include <memory>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/transport_choice.h"

namespace pipetrain::device {

// The communicator for tensors on `device` among `group`'s ranks, by choose_transport:
// an NCCL communicator over the same ranks, or `group` itself (MPI). Collective.
std::shared_ptr<comm::Communicator> communicator_for(
    const std::shared_ptr<comm::MpiCommunicator>& group, at::Device device);

// How payloads travel between this rank and one neighbouring stage of its pipe.
struct NeighbourLink {
  comm::Transport transport;
  // Over NCCL, one communicator per direction (each its own stream: a send queued one way
  // never waits behind a receive queued the other), `to` for what this rank sends to the
  // neighbour, `from` for what it receives; null for MPI (and equal for a test's MPI pair).
  std::shared_ptr<comm::Communicator> to, from;
  int rank_there = 0;  // the neighbour's rank in both
};

// The links to this rank's neighbouring stages in `pipe` (ranked by stage), by
// comm::pair_transports: NCCL between neighbours on GPUs of their own, over two
// communicators of the two (one per direction); MPI (with host staging) between neighbours that
// share a GPU or sit on the CPU. Collective over `pipe`. With `own_pairs` (tests), every pair gets
// a communicator of its own, MPI where NCCL is not chosen, so payloads travel apart from headers
// everywhere.
std::map<int, NeighbourLink> neighbour_links(const std::shared_ptr<comm::MpiCommunicator>& pipe,
                                             at::Device device, bool own_pairs = false);

}  // namespace pipetrain::device
