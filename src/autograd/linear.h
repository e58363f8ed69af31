#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace pipetrain::autograd {

// y = x Wᵀ + b, as at::linear; `bias` may be undefined. Recorded while backward may be split
// (see recording_splittable()), its backward computes the input gradient (the bias's is
// ATen's sum) and,
// inside a DeferWeightGrads scope, defers the weight gradient (the flattened gᵀ x, kept
// until then with the g and x it needs) into that scope's store; elsewhere it is ATen's
// linear, kernels and autograd unchanged.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// An input held in slices (sequence parallelism): `gather` makes the whole input from this
// rank's slice, `scatter` is its adjoint (the whole input's gradient to the slice's).
struct SlicedInput {
  std::function<at::Tensor(const at::Tensor&)> gather;
  std::function<at::Tensor(const at::Tensor&)> scatter;
};

// y = gather(x) Wᵀ + b keeping only the slice `x` for backward: the weight gradient gathers
// it again (Megatron's sequence-parallel linear), the input gradient is scattered. Always
// recorded this way (not only while backward may be split); inside a DeferWeightGrads
// scope the weight gradient's product is deferred as linear()'s, its gather done at once.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                  const SlicedInput& sliced);

}  // namespace pipetrain::autograd
