#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/transport_choice.h"

namespace pipetrain::device {

// The communicator for tensors on `device` among `group`'s ranks, by choose_transport:
// an NCCL communicator over the same ranks, or `group` itself (MPI). Collective.
std::shared_ptr<comm::Communicator> communicator_for(
    const std::shared_ptr<comm::MpiCommunicator>& group, at::Device device);

// Which transport a communicator from communicator_for is.
comm::Transport transport_of(const comm::Communicator& communicator);

}  // namespace pipetrain::device
