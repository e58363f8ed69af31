#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "pipetrain/optim/optimizer_settings.h"

namespace pipetrain::optim {

// Adam, AdamW or SGD from LibTorch with read_optimizer_settings(config); for CUDA
// parameters Adam and AdamW step with ATen's fused kernels (FusedAdam, FusedAdamW).
// `with_weight_decay` false: the optimizer applies none (its caller applies decay to some
// parameters only, see apply_weight_decay).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> parameters,
                                                        bool with_weight_decay = true);

// How the optimizer `config` names applies weight decay: decoupled (AdamW) or as L2.
struct WeightDecay {
  double rate = 0;
  bool decoupled = false;
};
WeightDecay weight_decay_of(const OptimizerConfig& config);

// Weight decay as the optimizer steps it, for `parameter` at learning rate `lr`: decoupled
// decay shrinks the parameter by lr * rate (before the update, as torch.optim.AdamW does);
// L2 decay (Adam, SGD) adds rate * parameter to its gradient, which it must have. `mask`
// (optional, bool or 0/1 per element, the parameter's shape) limits it to some elements.
void apply_weight_decay(const WeightDecay& decay, at::Tensor& parameter, double lr,
                        const at::Tensor& mask = {});

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Drops the gradients of `optimizer`'s parameters (as zero_grad() does, without its
// detach_ call per parameter: nothing else holds them).
void drop_gradients(torch::optim::Optimizer& optimizer);

}  // namespace pipetrain::optim
