#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::comm {

// Whether this build has the NCCL transport (a CUDA build, PIPETRAIN_CUDA).
bool nccl_compiled();

// Collective over `bootstrap`: an NCCL communicator over the same ranks for CUDA tensors
// on GPU `device` (each rank its own GPU: see choose_transport), its unique id broadcast
// over MPI. It keeps `bootstrap`, which ranks its peers. Null when this build has no NCCL.
std::shared_ptr<Communicator> make_nccl_communicator(
    std::shared_ptr<const MpiCommunicator> bootstrap, int device);

}  // namespace pipetrain::comm
