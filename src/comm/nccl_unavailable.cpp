// The CPU build: no NCCL, CUDA tensors (if any) travel over MPI.
#include "comm/nccl_communicator.h"

namespace pipetrain::comm {

bool nccl_compiled() {
  return false;
}

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<const MpiCommunicator>, int,
                                                     NcclStream) {
  return nullptr;
}

}  // namespace pipetrain::comm
