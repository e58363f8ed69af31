#include "pipetrain/comm/nccl_communicator.h"

namespace pipetrain::comm {

std::shared_ptr<Communicator> communicator_for(const std::shared_ptr<MpiCommunicator>& group,
                                               at::Device device) {
  if (device.is_cuda() && nccl_compiled()) {
    if (auto nccl = make_nccl_communicator(*group, device.index() < 0 ? 0 : device.index())) {
      return nccl;
    }
  }
  return group;
}

}  // namespace pipetrain::comm
