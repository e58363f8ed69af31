#include "pipetrain/optim/optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace pipetrain {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> parameters) {
  const OptimizerSettings s = read_optimizer_settings(config);
  if (config.type == "SGD") {
    return std::make_unique<torch::optim::SGD>(
        parameters,
        torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
  }
  if (config.type == "AdamW") {
    return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(s.lr)
                                                                 .betas({s.beta1, s.beta2})
                                                                 .eps(s.eps)
                                                                 .weight_decay(s.weight_decay));
  }
  return std::make_unique<torch::optim::Adam>(parameters, torch::optim::AdamOptions(s.lr)
                                                              .betas({s.beta1, s.beta2})
                                                              .eps(s.eps)
                                                              .weight_decay(s.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace pipetrain
