#pragma once

#include <ATen/core/Tensor.h>

#include "pipetrain/tensor_parallel/group.h"

// The autograd-aware collectives Megatron-LM's tensor-parallel layers are made of.
// Each is the identity for a group of one.
namespace pipetrain::tensor_parallel {

// Forward: the identity. Backward: sums the gradient over the group. Where a replicated
// activation enters a region computed in shards (column-parallel linear).
at::Tensor copy_to_group(const at::Tensor& x, const Group& group);

// Forward: sums over the group. Backward: the identity. Where the shards' partial results
// leave the region (row-parallel linear, vocabulary-parallel embedding).
at::Tensor reduce_from_group(const at::Tensor& x, const Group& group);

// Forward: concatenates every rank's `x` along the last dimension. Backward: keeps this
// rank's part of the gradient.
at::Tensor gather_from_group(const at::Tensor& x, const Group& group);

}  // namespace pipetrain::tensor_parallel
