#pragma once

#include <string>
#include <vector>

#include "pipetrain/device/cuda.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// For the job line: each rank's device and transports, e.g. "cuda:0 (NVIDIA H200), pipe
// mpi, data-parallel mpi on every rank", or one entry per rank where they differ.
// Collective over the grid's world.
std::string describe_devices(const engine::PipelineEngine& engine);

// Whether any rank of the job computes on a GPU. Collective over the grid's world.
bool any_rank_on_gpu(const engine::PipelineEngine& engine);

// Every rank's GPU memory in rank order (zeros for a rank on the CPU). Collective over the
// grid's world; for jobs where any_rank_on_gpu.
std::vector<device::GpuMemory> gather_gpu_memory(const engine::PipelineEngine& engine);

// For the progress line: " mem A/B GiB", the most any rank holds now (A) and at its peak
// (B); empty without GPUs.
std::string memory_summary(const std::vector<device::GpuMemory>& ranks);

}  // namespace pipetrain::trainer
