#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "device/memory_use.h"

namespace pipetrain::device {

// What pipetrain needs to know of CUDA, answered without CUDA headers; a CPU build answers
// "no GPU" to all of it.

// Whether this build has CUDA (PIPETRAIN_CUDA).
bool cuda_built();
// GPUs this process may use (after CUDA_VISIBLE_DEVICES); 0 in a CPU build.
int visible_gpus();
// Makes `gpu` the current device of this thread (where new CUDA tensors go).
void use_gpu(int gpu);
// "host/PCI bus id" of a GPU: equal for two ranks exactly when they share it.
std::string gpu_identity(int gpu);
// The product name, e.g. "NVIDIA H200".
std::string gpu_name(int gpu);

// The caching allocator's view of a GPU's memory.
std::optional<MemoryUse> gpu_memory(int gpu);
// Starts counting peak_allocated afresh (no-op in a CPU build).
void reset_gpu_peak_memory(int gpu);

}  // namespace pipetrain::device
