#pragma once

#include <cstdint>
#include <functional>

#include "pipetrain/optim/optimizer_config.h"

// What the optimizer and learning-rate sections say, read and checked without torch (the
// config checks them before any work).
namespace pipetrain::optim {

// The optimizer's settings read from DeepSpeed's parameter names (lr, betas, eps,
// weight_decay, momentum) with their defaults, each range-checked: InputError naming
// optimizer.params.KEY for an unknown key or a bad value. Pure: configs check it early.
struct OptimizerSettings {
  double lr = 1e-3;
  double weight_decay = 0;  // AdamW: 0.01
  double momentum = 0;      // SGD
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};
OptimizerSettings read_optimizer_settings(const OptimizerConfig& config);

double base_learning_rate(const OptimizerConfig& config);

// Elements of optimizer state per parameter: Adam's two moments, SGD's momentum (counted
// as on), for the planner's memory and traffic.
int state_elements_per_parameter(const OptimizerConfig& config);

// The learning rate of optimizer step `step` (0-based), DeepSpeed's schedules:
//   WarmupLR        warmup_min_lr -> warmup_max_lr over warmup_num_steps (log or linear)
//   WarmupDecayLR   the same, then linearly to 0 at total_num_steps
//   WarmupCosineLR  base lr scaled from warmup_min_ratio up to 1, then a cosine down to
//                   cos_min_ratio at total_num_steps
// No type: the optimizer's lr throughout. Throws InputError naming scheduler.params.KEY.
using LrSchedule = std::function<double(int64_t step)>;
LrSchedule make_lr_schedule(const SchedulerConfig& config, double base_lr);

}  // namespace pipetrain::optim
