#include "pipetrain/engine/mixed_precision_optimizer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace pipetrain::engine {
namespace {

// Keeps the clipping coefficient finite when every gradient is zero (DeepSpeed's value).
constexpr double kClipEpsilon = 1e-6;

}  // namespace

at::ScalarType to_scalar_type(Precision precision) {
  switch (precision) {
    case Precision::kBf16:
      return at::kBFloat16;
    case Precision::kFp16:
      return at::kHalf;
    case Precision::kFp32:
      return at::kFloat;
  }
  return at::kFloat;
}

MixedPrecisionOptimizer::MixedPrecisionOptimizer(module::PipelineModule& module,
                                                 std::shared_ptr<const topology::Grid> grid,
                                                 const TrainingConfig& config,
                                                 const std::vector<at::Tensor>& norm_parameters)
    : grid_(std::move(grid)),
      dtype_(to_scalar_type(config.precision.dtype)),
      clipping_(config.gradient_clipping),
      loss_scaler_(dtype_ == at::kHalf ? config.precision.loss_scaler
                                       : optim::LossScalerConfig{.loss_scale = 1}) {
  if (dtype_ != at::kFloat) module.to(dtype_);
  std::vector<at::Tensor> masters;
  for (const auto& p : module.parameters()) {
    masters.push_back(
        dtype_ == at::kFloat ? p : p.detach().to(at::kFloat).clone().requires_grad_(true));
    masters_.emplace_back(p, masters.back());
  }
  for (const auto& p : norm_parameters) norm_masters_.push_back(master_of(p));
  optimizer_ = optim::make_optimizer(config.optimizer, masters);
  lr_schedule_ =
      optim::make_lr_schedule(config.scheduler, optim::base_learning_rate(config.optimizer));
}

const at::Tensor& MixedPrecisionOptimizer::master_of(const at::Tensor& parameter) const {
  for (const auto& [p, master] : masters_) {
    if (p.is_same(parameter)) return master;
  }
  throw std::invalid_argument("not a parameter of this optimizer's module");
}

void MixedPrecisionOptimizer::copy_masters_to_model() {
  at::NoGradGuard no_grad;
  for (auto& [parameter, master] : masters_) {
    if (!master.is_same(parameter)) parameter.copy_(master);
  }
}

void MixedPrecisionOptimizer::step(int64_t step) {
  const bool overflow = unscale_onto_masters();
  loss_scaler_.update(overflow);
  if (!overflow) {
    last_grad_norm_ = clipping_ > 0 || norm_wanted_ ? global_grad_norm()
                                                    : std::numeric_limits<double>::quiet_NaN();
    if (clipping_ > 0) clip(last_grad_norm_);
    last_learning_rate_ = lr_schedule_(step);
    optim::set_learning_rate(*optimizer_, last_learning_rate_);
    optimizer_->step();
    copy_masters_to_model();
  }
  optimizer_->zero_grad();
  for (auto& [parameter, master] : masters_) parameter.mutable_grad() = at::Tensor();
}

bool MixedPrecisionOptimizer::unscale_onto_masters() {
  const double unscale = 1.0 / loss_scaler_.scale();
  for (auto& [parameter, master] : masters_) {
    if (!parameter.grad().defined()) continue;
    if (!master.is_same(parameter)) master.mutable_grad() = parameter.grad().to(at::kFloat);
    if (unscale != 1.0) master.mutable_grad().mul_(unscale);
  }
  if (dtype_ != at::kHalf) return false;
  // One pass on the device: a norm is finite exactly when its tensor is (up to a sum of
  // squares past the float range, which DeepSpeed's check also counts as an overflow).
  std::vector<at::Tensor> grads;
  for (const auto& [parameter, master] : masters_) {
    if (master.grad().defined()) grads.push_back(master.grad());
  }
  at::Tensor overflow = at::zeros({1}, at::kLong);
  if (!grads.empty()) {
    const at::Tensor finite = at::stack(at::_foreach_norm(grads, 2)).isfinite().all();
    overflow.fill_(finite.logical_not().to(at::kLong).item<int64_t>());  // the step's one wait
  }
  // Every stage and replica must take the same decision.
  grid_->world_comm()->all_reduce(overflow, comm::ReduceOp::kMax);
  return overflow.item<int64_t>() != 0;
}

double MixedPrecisionOptimizer::global_grad_norm() const {
  // The norm over the whole model: each stage's and shard's part, tied and replicated
  // tensors counted once.
  // One fused pass: each tensor's norm in its own type (accumulated in double on the CPU),
  // their squares summed in double on the device, then read once (the end of the step).
  std::vector<at::Tensor> grads;
  for (const auto& master : norm_masters_) {
    if (master.grad().defined()) grads.push_back(master.grad());
  }
  at::Tensor squares = at::zeros({1}, at::kDouble);
  if (!grads.empty()) {
    squares += at::stack(at::_foreach_norm(grads, 2)).to(at::kDouble).pow(2).sum().cpu();
  }
  grid_->pipe_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  grid_->model_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return std::sqrt(squares.item<double>());
}

void MixedPrecisionOptimizer::clip(double norm) {
  const double coefficient = clipping_ / (norm + kClipEpsilon);
  if (!(clipping_ > 0 && coefficient < 1.0)) return;  // also when the norm is NaN
  for (const auto& [parameter, master] : masters_) {
    if (master.grad().defined()) master.mutable_grad().mul_(coefficient);
  }
}

}  // namespace pipetrain::engine
