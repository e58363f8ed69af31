// The CPU build: no GPU is ever visible.
#include <stdexcept>

#include "device/cuda.h"

namespace pipetrain::device {

bool cuda_built() {
  return false;
}

int visible_gpus() {
  return 0;
}

void use_gpu(int) {
  throw std::logic_error("use_gpu: this build has no CUDA");
}

std::string gpu_identity(int) {
  return {};
}

std::string gpu_name(int) {
  return {};
}

std::optional<MemoryUse> gpu_memory(int) {
  return std::nullopt;
}

void reset_gpu_peak_memory(int) {}

}  // namespace pipetrain::device
