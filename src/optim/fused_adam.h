#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace pipetrain::optim {

// LibTorch's Adam and AdamW, with their options and per-parameter state (which checkpoints
// read and write), stepped by ATen's fused multi-tensor kernels: a few launches per step
// over all parameters of a device, where LibTorch's step runs several small kernels per
// parameter. Made for CUDA parameters (see make_optimizer); amsgrad is not supported.
class FusedAdam final : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace pipetrain::optim
