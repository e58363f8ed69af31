#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace pipetrain::autograd {

// A weight's gradient in a backward that may be split (see weight_grad_store.h): inside a
// DeferWeightGrads scope, and for a leaf `weight` (whose .grad is where autograd would put
// it), `compute` is deferred into the scope's store, its result later added into the
// weight's .grad (announced as autograd's accumulation is, gradient_arrival.h), and an
// undefined tensor is returned; elsewhere `compute` runs now and its result is returned,
// for autograd to accumulate.
at::Tensor weight_gradient(std::function<at::Tensor()> compute, const at::Tensor& weight);

}  // namespace pipetrain::autograd
