#pragma once

#include <ATen/core/Tensor.h>

namespace pipetrain::autograd {

// y = x Wᵀ + b, as at::linear; `bias` may be undefined. Recorded while backward may be split
// (see recording_splittable()), its backward computes the input gradient (the bias's is
// ATen's sum) and,
// inside a DeferWeightGrads scope, defers the weight gradient (the flattened gᵀ x, kept
// until then with the g and x it needs) into that scope's store; elsewhere it is ATen's
// linear, kernels and autograd unchanged.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace pipetrain::autograd
