#pragma once

#include <c10/core/Device.h>

#include <string>

#include "pipetrain/comm/communicator.h"
#include "pipetrain/device/device_choice.h"

namespace pipetrain::device {

// This rank's device for `kind` (see choose_gpu), made the thread's current CUDA device
// when it is a GPU. Collective over `world`: without a launcher's local rank, the ranks
// of one host are counted by host name.
at::Device place_rank(DeviceKind kind, comm::Communicator& world);

// For the job line: "cpu", or "cuda:0 (NVIDIA H200)".
std::string describe_device(at::Device device);

}  // namespace pipetrain::device
