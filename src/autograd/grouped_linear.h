#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace pipetrain::autograd {

// Rows grouped by the weight that takes them (an MoE layer's tokens grouped by expert):
// rows [counts[0] of group 0, then counts[1] of group 1, ...] x [n, in], weights [groups, out,
// in]; row i of group e becomes x_i weights[e]ᵀ. Returns [n, out]. Forward and both
// gradients are one grouped GEMM each where ATen has one for these widths (at::_grouped_mm:
// rows of a multiple of 16 bytes; on a GPU bfloat16), else a loop of one product per group.
// The weight gradient is one [groups, out, in] tensor (zero for a group without rows),
// deferred inside a DeferWeightGrads scope as linear()'s (weight_grad_store.h).
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weights,
                          const std::vector<int64_t>& counts);

}  // namespace pipetrain::autograd
