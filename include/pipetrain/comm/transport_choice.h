#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pipetrain::comm {

// How a group of ranks moves tensors: NCCL on the GPUs, or MPI, which stages CUDA
// tensors through pinned host memory.
enum class Transport { kMpi, kNccl };

std::string_view transport_name(Transport transport);

// The transport for a group, from each member's GPU identity ("host/PCI bus id", empty for
// a rank on the CPU): NCCL when the build has it, the group has two ranks or more and every
// member holds a GPU of its own (NCCL refuses two ranks on one GPU: "Duplicate GPU
// detected"); else MPI (also for a group of one, which moves nothing).
Transport choose_transport(const std::vector<std::string>& gpus, bool nccl_built);

// The transport between each pair of neighbouring stages (k, k + 1) of a pipe, from each
// stage's GPU identity: choose_transport over the two, so a pipe whose stages share GPUs
// only in part uses NCCL between the neighbours on different GPUs.
std::vector<Transport> pair_transports(const std::vector<std::string>& stage_gpus, bool nccl_built);

}  // namespace pipetrain::comm
