#pragma once

#include <torch/optim/optimizer.h>

#include <string>

#include "pipetrain/comm/tensor_list.h"

namespace pipetrain::optim {

// One parameter's optimizer state as named tensors (Adam/AdamW: step, exp_avg,
// exp_avg_sq[, max_exp_avg_sq]; SGD: momentum_buffer), empty before the first step.
comm::NamedTensors optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter);

// Whether a state entry holds one value per parameter element (moments, momentum), not
// one per parameter (Adam's step count).
inline bool is_per_element(const std::string& key) {
  return key != "step";
}

// Installs state saved by optimizer_state() for `parameter` (replacing any it had).
void set_optimizer_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter,
                         const comm::NamedTensors& state);

}  // namespace pipetrain::optim
