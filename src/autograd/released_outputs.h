#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace pipetrain::autograd {

// Megatron's deallocate_output_tensor: once an activation has been sent to the next stage,
// backward needs only its place in the autograd graph (the gradient edge backward starts
// from), not its values. release_values() frees them, keeping that place; a leaf, a view,
// a tensor no graph produced or one referenced elsewhere (a node that saved it as its input)
// is left as it is (its values may be read again). A copy in flight (a send's own reference
// to the storage) keeps the memory until it completes, and so does the output's own node
// where it saved its result (a ReLU's).
// Returns whether the values were released.
bool release_values(at::Tensor& output);

// torch::autograd::backward(outputs, grads) for outputs whose values may have been
// released: from their gradient edges, each gradient checked against the shape the graph
// recorded for its output when it was made.
void backward_from(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& grads);

}  // namespace pipetrain::autograd
