#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace pipetrain::module {

// The default random generator's state on `device` (CPU or a CUDA device), and setting it.
at::Tensor rng_state(const at::Device& device);
void set_rng_state(const at::Device& device, const at::Tensor& state);

}  // namespace pipetrain::module
