#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace pipetrain {

// Tensors held or moved together: a layer's inputs or outputs, their gradients, a
// micro-batch's labels, the frames of one transfer.
using TensorList = std::vector<at::Tensor>;

}  // namespace pipetrain
