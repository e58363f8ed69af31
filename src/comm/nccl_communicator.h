#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::comm {

// Whether this build has the NCCL transport (a CUDA build, PIPETRAIN_CUDA).
bool nccl_compiled();

// The stream an NCCL communicator issues on: one of torch's pool (high priority, shared
// round-robin among the pool's users), or one it creates and owns (a pipe lane, whose
// blocked send must never hold up another lane's receive on a shared stream).
enum class NcclStream { kPooled, kOwn };

// Collective over `bootstrap`: an NCCL communicator over the same ranks for CUDA tensors
// on GPU `device` (each rank its own GPU: see choose_transport), its unique id broadcast
// over MPI. It keeps `bootstrap`, which ranks its peers. Null when this build has no NCCL.
std::shared_ptr<Communicator> make_nccl_communicator(
    std::shared_ptr<const MpiCommunicator> bootstrap, int device,
    NcclStream stream = NcclStream::kPooled);

}  // namespace pipetrain::comm
