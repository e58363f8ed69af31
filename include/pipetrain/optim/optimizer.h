#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <vector>

#include "pipetrain/optim/optimizer_config.h"

namespace pipetrain {

// Adam, AdamW or SGD from LibTorch, with DeepSpeed's parameter names (lr, betas, eps,
// weight_decay, momentum). Throws InputError naming optimizer.params.KEY for bad values.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<at::Tensor> parameters);

double base_learning_rate(const OptimizerConfig& config);

// The learning rate of optimizer step `step` (0-based), DeepSpeed's schedules:
//   WarmupLR        warmup_min_lr -> warmup_max_lr over warmup_num_steps (log or linear)
//   WarmupDecayLR   the same, then linearly to 0 at total_num_steps
//   WarmupCosineLR  base lr scaled from warmup_min_ratio up to 1, then a cosine down to
//                   cos_min_ratio at total_num_steps
// No type: the optimizer's lr throughout. Throws InputError naming scheduler.params.KEY.
using LrSchedule = std::function<double(int64_t step)>;
LrSchedule make_lr_schedule(const SchedulerConfig& config, double base_lr);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace pipetrain
