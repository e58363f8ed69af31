#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "pipetrain/comm/communicator.h"

// DeepSpeed's PartitionedTensor for stage-to-stage transfers under tensor parallelism:
// an activation (or gradient) that every rank of a tensor-parallel group holds alike
// travels as one 1/size share per rank, and the receiving group all-gathers the shares.
// The tensors must be equal across the sending group (as they are between Megatron-style
// layers, whose outputs are all-reduced); the receivers check that their layouts agree.
namespace pipetrain::comm {

struct PartitionedTensors {
  // The whole tensors' transfer header (see encode_header): dtypes, requires-grad, shapes;
  // in host memory, so it travels with the transfer's header over MPI.
  at::Tensor layout;
  // This rank's share of each tensor: its flat elements [rank * n, (rank + 1) * n), with
  // n = ceil(numel / size), zero-padded where they run past the end.
  std::vector<at::Tensor> shares;
};

PartitionedTensors partition(const std::vector<at::Tensor>& tensors, int rank, int size);

// Collective over `group` (the receivers, ordered as the senders were): the whole tensors
// from every rank's shares, all-gathered over `group` (NCCL where its ranks hold GPUs of
// their own); floating tensors that required grad require it again. The layouts (in host
// memory) are compared over `control`, the same ranks over MPI. Throws std::runtime_error
// when the layout is corrupt, does not match the shares, or differs between the ranks.
std::vector<at::Tensor> assemble(const PartitionedTensors& partitioned, Communicator& group,
                                 Communicator& control);

}  // namespace pipetrain::comm
