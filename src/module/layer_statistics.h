#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

// Figures layers report of their training forward passes (an MoE layer's tokens per
// expert, dropped tokens, auxiliary losses), summed until taken: the trainer takes them
// after each step. Kept as tensors on the layers' device, so recording never waits for it.
namespace pipetrain::module {

// Adds `value` (any shape, the same for every call with `name`) to the sum kept under
// `name`, unless a checkpointed layer is being recomputed (its first forward counted).
void record_statistic(const std::string& name, const at::Tensor& value);

// The sums recorded since the last call, detached; and forgets them.
std::map<std::string, at::Tensor> take_statistics();

}  // namespace pipetrain::module
