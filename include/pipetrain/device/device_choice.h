#pragma once

#include <string>

namespace pipetrain::device {

// Where a rank computes: `auto` takes a GPU when the build has CUDA and one is visible.
enum class DeviceKind { kAuto, kCpu, kCuda };

// The GPU a rank takes among `visible_gpus` (CUDA_VISIBLE_DEVICES applies before the count):
// local_rank % visible_gpus; -1 for the CPU. InputError for kCuda without a usable GPU,
// saying why (`cuda_built`: whether this build has CUDA at all).
int choose_gpu(DeviceKind kind, int local_rank, int visible_gpus, bool cuda_built);

// The rank's index among the ranks on its machine: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK,
// SLURM's SLURM_LOCALID or MPICH's MPI_LOCALRANKID when set, else `fallback`.
int local_rank_from_environment(int fallback);

}  // namespace pipetrain::device
