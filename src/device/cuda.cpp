// The CUDA build's answers (see cuda_unavailable.cpp for the CPU build's).
#include "device/cuda.h"

#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <array>
#include <stdexcept>

#include "device/emulated_hosts.h"

namespace pipetrain::device {
namespace {

void check_cuda(cudaError_t code, const char* call) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(code));
}

}  // namespace

bool cuda_built() {
  return true;
}

int visible_gpus() {
  return static_cast<int>(c10::cuda::device_count());
}

void use_gpu(int gpu) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(gpu));
}

std::string gpu_identity(int gpu) {
  std::array<char, 64> bus{};
  check_cuda(cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), gpu),
             "cudaDeviceGetPCIBusId");
  return host_identity() + "/" + bus.data();
}

std::string gpu_name(int gpu) {
  cudaDeviceProp properties{};
  check_cuda(cudaGetDeviceProperties(&properties, gpu), "cudaGetDeviceProperties");
  return properties.name;
}

std::optional<MemoryUse> gpu_memory(int gpu) {
  using c10::CachingAllocator::StatType;
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // the allocator's devices
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(gpu));
  const auto all = static_cast<std::size_t>(StatType::AGGREGATE);
  return MemoryUse{.allocated = stats.allocated_bytes[all].current,
                   .peak_allocated = stats.allocated_bytes[all].peak};
}

void reset_gpu_peak_memory(int gpu) {
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(gpu));
}

}  // namespace pipetrain::device
