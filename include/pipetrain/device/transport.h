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
  std::shared_ptr<comm::Communicator> comm;  // NCCL over the two ranks; null for MPI
  int rank_there = 0;                        // the neighbour's rank in `comm`
};

// The links to this rank's neighbouring stages in `pipe` (ranked by stage), by
// comm::pair_transports: NCCL between neighbours on GPUs of their own, over a communicator
// of the two; MPI (with host staging) between neighbours that share a GPU or sit on the
// CPU. Collective over `pipe`. With `own_pairs` (tests), every pair gets a communicator of
// its own, MPI where NCCL is not chosen, so payloads travel apart from headers everywhere.
std::map<int, NeighbourLink> neighbour_links(const std::shared_ptr<comm::MpiCommunicator>& pipe,
                                             at::Device device, bool own_pairs = false);

}  // namespace pipetrain::device
