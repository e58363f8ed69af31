#include "optim/replicated_masters.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "optim/optimizer_state.h"

namespace pipetrain::optim {

ReplicatedMasters::ReplicatedMasters(const std::vector<at::Tensor>& parameters,
                                     const std::vector<at::Tensor>& norm_parameters,
                                     std::vector<bool> decayed,
                                     std::shared_ptr<const topology::Grid> grid,
                                     const std::vector<at::Tensor>& experts)
    : grid_(std::move(grid)), parameters_(parameters), decayed_(std::move(decayed)) {
  if (decayed_.size() != parameters_.size())
    throw std::invalid_argument("one weight-decay flag per parameter");
  for (const auto& p : parameters_) {
    masters_.push_back(
        p.scalar_type() == at::kFloat ? p : p.detach().to(at::kFloat).clone().requires_grad_(true));
  }
  for (const auto& p : norm_parameters) {
    const bool expert = std::any_of(experts.begin(), experts.end(),
                                    [&](const at::Tensor& e) { return e.is_same(p); });
    (expert ? expert_norm_masters_ : norm_masters_).push_back(master_of(p));
  }
}

const at::Tensor& ReplicatedMasters::master_of(const at::Tensor& parameter) const {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].is_same(parameter)) return masters_[i];
  }
  throw std::invalid_argument("not a parameter of this optimizer's module");
}

void ReplicatedMasters::take_gradients(double unscale) {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    const at::Tensor& parameter = parameters_[i];
    at::Tensor& master = masters_[i];
    if (!parameter.grad().defined()) continue;
    if (!master.is_same(parameter)) master.mutable_grad() = parameter.grad().to(at::kFloat);
    if (unscale != 1.0) master.mutable_grad().mul_(unscale);
  }
}

void ReplicatedMasters::apply_weight_decay(const optim::WeightDecay& decay, double lr) {
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (decayed_[i] && masters_[i].grad().defined())
      optim::apply_weight_decay(decay, masters_[i], lr);
  }
}

at::Tensor ReplicatedMasters::squared_grad_norm() const {
  // The stage's and shard's part, tied and replicated tensors counted once. One fused
  // pass: each tensor's norm in its own type, their squares summed in double on the
  // device, then read once (the end of the step).
  auto sum_of_squares = [](const std::vector<at::Tensor>& masters) {
    std::vector<at::Tensor> grads;
    for (const auto& master : masters) {
      if (master.grad().defined()) grads.push_back(master.grad());
    }
    at::Tensor squares = at::zeros({1}, at::kDouble);
    if (!grads.empty())
      squares += at::stack(at::_foreach_norm(grads, 2)).to(at::kDouble).pow(2).sum().cpu();
    return squares;
  };
  at::Tensor squares = sum_of_squares(norm_masters_);
  // Each rank of an expert-parallel group holds other experts: their parts add up.
  at::Tensor experts = sum_of_squares(expert_norm_masters_);
  if (grid_->expert_parallel_size() > 1)
    grid_->expert_comm()->all_reduce(experts, comm::ReduceOp::kSum);
  return squares + experts;
}

void ReplicatedMasters::copy_to_model() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!masters_[i].is_same(parameters_[i])) parameters_[i].copy_(masters_[i]);
  }
}

void ReplicatedMasters::clear_model_gradients() {
  for (auto& parameter : parameters_) parameter.mutable_grad() = at::Tensor();
}

int64_t ReplicatedMasters::master_bytes() const {
  int64_t bytes = 0;
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    if (!masters_[i].is_same(parameters_[i])) bytes += masters_[i].nbytes();
  }
  return bytes;
}

std::vector<ParameterState> ReplicatedMasters::whole_state(
    torch::optim::Optimizer& optimizer) const {
  std::vector<ParameterState> whole;
  for (const auto& master : masters_)
    whole.push_back({master, optim::optimizer_state(optimizer, master)});
  return whole;
}

ParameterState ReplicatedMasters::gathered_state(torch::optim::Optimizer& optimizer,
                                                 std::size_t position) const {
  const at::Tensor& master = masters_.at(position);
  return {master, optim::optimizer_state(optimizer, master)};
}

void ReplicatedMasters::restore(const std::vector<ParameterState>& whole,
                                torch::optim::Optimizer& optimizer) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    masters_[i].copy_(whole.at(i).master);
    optim::set_optimizer_state(optimizer, masters_[i], whole[i].optimizer_state);
  }
}

}  // namespace pipetrain::optim
