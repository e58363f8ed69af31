#include "pipetrain/device/transport.h"

#include "pipetrain/comm/nccl_communicator.h"
#include "pipetrain/device/cuda.h"

namespace pipetrain::device {

std::shared_ptr<comm::Communicator> communicator_for(
    const std::shared_ptr<comm::MpiCommunicator>& group, at::Device device) {
  const std::string mine = device.is_cuda() ? gpu_identity(device.index()) : std::string();
  const auto gpus = comm::all_gather_text(*group, mine);
  if (comm::choose_transport(gpus, comm::nccl_compiled()) == comm::Transport::kNccl) {
    if (auto nccl = comm::make_nccl_communicator(*group, device.index())) {
      nccl->set_timeout(group->timeout());
      return nccl;
    }
  }
  return group;
}

comm::Transport transport_of(const comm::Communicator& communicator) {
  return dynamic_cast<const comm::MpiCommunicator*>(&communicator) ? comm::Transport::kMpi
                                                                   : comm::Transport::kNccl;
}

}  // namespace pipetrain::device
