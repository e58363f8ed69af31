#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "pipetrain/optim/optimizer_settings.h"

namespace pipetrain::optim {

// Adam, AdamW or SGD from LibTorch with read_optimizer_settings(config); for CUDA
// parameters Adam and AdamW step with ATen's fused kernels (FusedAdam, FusedAdamW).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> parameters);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace pipetrain::optim
