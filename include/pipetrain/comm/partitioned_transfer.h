#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "pipetrain/comm/communicator.h"

// DeepSpeed's PartitionedTensor for stage-to-stage transfers under tensor parallelism:
// an activation (or gradient) that every rank of a tensor-parallel group holds alike
// travels as one 1/size share per rank, and the receiving group all-gathers the shares.
namespace pipetrain::comm {

struct PartitionedTensors {
  // int64 description of the whole tensors: [count, then per tensor: requires_grad,
  // rank, dims...].
  at::Tensor layout;
  // This rank's share of each tensor: its flat elements [rank * n, (rank + 1) * n), with
  // n = ceil(numel / size) (the last share zero-padded).
  std::vector<at::Tensor> shares;
};

PartitionedTensors partition(const std::vector<at::Tensor>& tensors, int rank, int size);

// Collective over `group` (the receivers, ordered as the senders were): the whole tensors
// from every rank's shares; floating tensors that required grad require it again.
std::vector<at::Tensor> assemble(const PartitionedTensors& partitioned, Communicator& group);

}  // namespace pipetrain::comm
