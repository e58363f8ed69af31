#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace pipetrain::autograd {

// Rows grouped by the weight that takes them (an MoE layer's tokens grouped by expert):
// rows [counts[0] of group 0, then counts[1] of group 1, ...] x [n, in], weights [groups, out,
// in]; row i of group e becomes x_i weights[e]ᵀ. Returns [n, out]. Recorded while backward
// may be split (weight_grad_store.h), its backward computes the rows' gradient and defers
// the stacked weight gradient (one [groups, out, in] tensor, zero for a group without rows)
// inside a DeferWeightGrads scope, as linear() does; elsewhere ATen's linear per group.
at::Tensor grouped_linear(const at::Tensor& x, const at::Tensor& weights,
                          const std::vector<int64_t>& counts);

}  // namespace pipetrain::autograd
