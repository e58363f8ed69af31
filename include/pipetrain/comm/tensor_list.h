#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace pipetrain::comm {

// Tensors held or moved together: a layer's inputs or outputs, their gradients, a
// micro-batch's labels, the frames of one transfer.
using TensorList = std::vector<at::Tensor>;

// Tensors by name, in order (a checkpoint file's, a parameter's optimizer state).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

}  // namespace pipetrain::comm
