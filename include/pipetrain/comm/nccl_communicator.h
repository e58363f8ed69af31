#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::comm {

// Whether this build has the NCCL transport (a CUDA build, PIPETRAIN_CUDA).
bool nccl_compiled();

// Collective over `bootstrap`: an NCCL communicator over the same ranks for CUDA tensors
// on GPU `device`, its unique id broadcast over MPI. Null when this build has no NCCL or
// when two ranks of the group share a GPU, which NCCL refuses ("Duplicate GPU detected").
std::shared_ptr<Communicator> make_nccl_communicator(const MpiCommunicator& bootstrap, int device);

// The transport for tensors on `device` among `group`'s ranks: NCCL where it can serve,
// else MPI (which stages CUDA tensors through pinned host memory). Collective.
std::shared_ptr<Communicator> communicator_for(const std::shared_ptr<MpiCommunicator>& group,
                                               at::Device device);

}  // namespace pipetrain::comm
