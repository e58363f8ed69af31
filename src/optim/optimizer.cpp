#include "pipetrain/optim/optimizer.h"

#include <ATen/ATen.h>

#include "optim/fused_adam.h"
#include "optim/fused_sgd.h"

namespace pipetrain::optim {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> parameters,
                                                        bool with_weight_decay) {
  OptimizerSettings s = read_optimizer_settings(config);
  if (!with_weight_decay) s.weight_decay = 0;
  // On a GPU, ATen's fused kernels; on the CPU, LibTorch's own step (bitwise what a plain
  // LibTorch loop computes).
  const bool fused = !parameters.empty() && parameters.front().is_cuda();
  if (config.type == "SGD") {
    const auto options =
        torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay);
    if (fused) return std::make_unique<FusedSgd>(parameters, options);
    return std::make_unique<torch::optim::SGD>(parameters, options);
  }
  if (config.type == "AdamW") {
    const auto options = torch::optim::AdamWOptions(s.lr)
                             .betas({s.beta1, s.beta2})
                             .eps(s.eps)
                             .weight_decay(s.weight_decay);
    if (fused) return std::make_unique<FusedAdamW>(parameters, options);
    return std::make_unique<torch::optim::AdamW>(parameters, options);
  }
  const auto options = torch::optim::AdamOptions(s.lr)
                           .betas({s.beta1, s.beta2})
                           .eps(s.eps)
                           .weight_decay(s.weight_decay);
  if (fused) return std::make_unique<FusedAdam>(parameters, options);
  return std::make_unique<torch::optim::Adam>(parameters, options);
}

WeightDecay weight_decay_of(const OptimizerConfig& config) {
  return {read_optimizer_settings(config).weight_decay, config.type == "AdamW"};
}

void apply_weight_decay(const WeightDecay& decay, at::Tensor& parameter, double lr,
                        const at::Tensor& mask) {
  if (decay.rate == 0) return;
  at::NoGradGuard no_grad;
  if (decay.decoupled) {
    const double factor = 1 - lr * decay.rate;  // rounded to the parameter's type once
    if (!mask.defined()) {
      parameter.mul_(factor);
    } else {
      parameter.mul_(at::ones_like(parameter).masked_fill_(mask.to(at::kBool), factor));
    }
    return;
  }
  at::Tensor& grad = parameter.mutable_grad();
  grad.add_(mask.defined() ? parameter * mask : parameter, decay.rate);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void drop_gradients(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) parameter.mutable_grad() = at::Tensor();
  }
}

}  // namespace pipetrain::optim
