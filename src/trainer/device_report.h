#pragma once

#include <string>
#include <vector>

#include "device/cuda.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// For the job line: each rank's device and transports, e.g. "cuda:0 (NVIDIA H200), pipe
// mpi, data-parallel mpi on every rank", or one entry per rank where they differ.
// Collective over the grid's world.
std::string describe_devices(const engine::PipelineEngine& engine);

// Whether any rank of the job computes on a GPU. Collective over the grid's world.
bool any_rank_on_gpu(const engine::PipelineEngine& engine);

// Every rank's tensor memory in rank order: a GPU rank's from the caching allocator, a CPU
// rank's from device::cpu_memory() when counted (memory_breakdown), else zeros. Collective
// over the grid's world.
std::vector<device::MemoryUse> gather_memory(const engine::PipelineEngine& engine);

// For the progress line: " mem A/B GiB", the most any rank holds now (A) and at its peak
// (B); empty without counts.
std::string memory_summary(const std::vector<device::MemoryUse>& ranks);

}  // namespace pipetrain::trainer
