#pragma once

#include <torch/optim/sgd.h>

namespace pipetrain::optim {

// LibTorch's SGD, with its options and per-parameter momentum buffers (which checkpoints
// read and write), stepped by ATen's fused multi-tensor kernel: one launch per step over
// the parameters of a group (two in a step where some momentum buffers are new), where
// LibTorch's step runs several small kernels per parameter. Made for CUDA parameters (see
// make_optimizer).
class FusedSgd final : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace pipetrain::optim
