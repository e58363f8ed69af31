#include "optim/mixed_precision_optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "optim/expert_split_masters.h"
#include "optim/optimizer_state.h"
#include "optim/replicated_masters.h"
#include "optim/sharded_masters.h"
#include "optim/weight_decay.h"

namespace pipetrain::optim {
namespace {

// Keeps the clipping coefficient finite when every gradient is zero (DeepSpeed's value).
constexpr double kClipEpsilon = 1e-6;

// Per parameter of `module` (in parameters() order), whether weight decay applies to it.
std::vector<bool> decayed_parameters(const module::PipelineModule& module,
                                     const std::vector<std::string>& exempt) {
  const WeightDecayRule rule(exempt);
  std::vector<bool> decayed;
  for (const auto& [full_name, tensor] : module.named_parameters()) {
    const auto dot = full_name.find('.');
    const module::LayerSpec& spec = module.specs().at(std::stoul(full_name.substr(0, dot)));
    const std::string name = full_name.substr(dot + 1);
    const bool listed = std::find(spec.no_weight_decay.begin(), spec.no_weight_decay.end(), name) !=
                        spec.no_weight_decay.end();
    decayed.push_back(rule.decays(spec.type, name, tensor.dim(), listed));
  }
  return decayed;
}

// Whether `tensor` is one of `tensors` (the same tensor, not an equal one).
bool contains(const std::vector<at::Tensor>& tensors, const at::Tensor& tensor) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const at::Tensor& t) { return t.is_same(tensor); });
}

// Some of a module's parameters, with what the masters need to know of each.
struct Partition {
  std::vector<at::Tensor> parameters;
  std::vector<bool> decayed;
};

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
                                                 const StepConfig& config,
                                                 const std::vector<at::Tensor>& norm_parameters,
                                                 const data_parallel::ShardedReductions& sharded,
                                                 const std::vector<at::Tensor>& expert_parameters)
    : grid_(std::move(grid)),
      dtype_(to_scalar_type(config.precision.dtype)),
      clipping_(config.gradient_clipping),
      weight_decay_(optim::weight_decay_of(config.optimizer)),
      loss_scaler_(dtype_ == at::kHalf ? config.precision.loss_scaler
                                       : optim::LossScalerConfig{.loss_scale = 1}) {
  // A 16-bit precision's model is converted once, by its owner (the engine, before data
  // parallelism lays out ZeRO's storage); fp32 takes the module's parameters as they are.
  for (const auto& parameter : module.parameters()) {
    if (dtype_ != at::kFloat && parameter.scalar_type() != dtype_)
      throw std::logic_error("the optimizer's model is not in its precision's 16-bit dtype");
  }
  decayed_ = decayed_parameters(module, config.weight_decay_exempt);
  if (!sharded.dense) {  // ZeRO shards the masters where data parallelism laid out pieces
    masters_ = std::make_shared<ReplicatedMasters>(module.parameters(), norm_parameters, decayed_,
                                                   grid_, expert_parameters);
  } else {
    masters_ = sharded_masters(module, norm_parameters, sharded, expert_parameters);
  }
  // Decay is applied here, to some parameters only (see apply_weight_decay).
  optimizer_ =
      optim::make_optimizer(config.optimizer, masters_->tensors(), /*with_weight_decay=*/false);
  lr_schedule_ =
      optim::make_lr_schedule(config.scheduler, optim::base_learning_rate(config.optimizer));
}

std::shared_ptr<MasterWeights> MixedPrecisionOptimizer::sharded_masters(
    module::PipelineModule& module, const std::vector<at::Tensor>& norm_parameters,
    const data_parallel::ShardedReductions& sharded,
    const std::vector<at::Tensor>& expert_parameters) {
  // Experts split over ranks apart from the rest (ExpertSplitMasters), see the header.
  const std::vector<at::Tensor> parameters = module.parameters();
  Partition dense, experts;
  std::vector<bool> is_expert;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const bool expert = contains(expert_parameters, parameters[i]);
    Partition& part = expert ? experts : dense;
    part.parameters.push_back(parameters[i]);
    part.decayed.push_back(decayed_[i]);
    is_expert.push_back(expert);
  }
  if (sharded.dense->parameters().size() != dense.parameters.size())
    throw std::logic_error("ZeRO: the sharded reduction holds other parameters than the masters");
  sharded_masters_ =
      std::make_shared<ShardedMasters>(sharded.dense, norm_parameters, dense.decayed, grid_);
  if (experts.parameters.empty()) return sharded_masters_;
  std::vector<at::Tensor> expert_norm;
  for (const auto& p : norm_parameters) {
    if (contains(experts.parameters, p)) expert_norm.push_back(p);
  }
  std::shared_ptr<MasterWeights> expert_masters;
  if (sharded.experts) {
    // ZeRO 1 over the ranks holding the same experts, whatever the stage: the experts'
    // weights stay whole, their masters and optimizer state are sharded.
    expert_masters =
        std::make_shared<ShardedMasters>(sharded.experts, expert_norm, experts.decayed, grid_);
  } else {
    expert_masters = std::make_shared<ReplicatedMasters>(
        experts.parameters, expert_norm, experts.decayed, grid_, experts.parameters);
  }
  return std::make_shared<ExpertSplitMasters>(sharded_masters_, std::move(expert_masters),
                                              is_expert);
}

const at::Tensor& MixedPrecisionOptimizer::master_of(const at::Tensor& parameter) const {
  const auto* replicated = dynamic_cast<const ReplicatedMasters*>(masters_.get());
  if (!replicated) throw std::logic_error("under ZeRO no rank holds every master");
  return replicated->master_of(parameter);
}

void MixedPrecisionOptimizer::step(int64_t step) {
  masters_->take_gradients(1.0 / loss_scaler_.scale());
  const bool overflow = any_overflow();
  loss_scaler_.update(overflow);
  if (!overflow) {
    last_grad_norm_ = clipping_ > 0 || norm_wanted_ ? global_grad_norm()
                                                    : std::numeric_limits<double>::quiet_NaN();
    if (clipping_ > 0) clip(last_grad_norm_);
    last_learning_rate_ = lr_schedule_(step);
    optim::set_learning_rate(*optimizer_, last_learning_rate_);
    masters_->apply_weight_decay(weight_decay_, last_learning_rate_);
    optimizer_->step();
    masters_->copy_to_model();
  }
  optim::drop_gradients(*optimizer_);
  masters_->clear_model_gradients();
}

double MixedPrecisionOptimizer::global_grad_norm() const {
  at::Tensor squares = masters_->squared_grad_norm();
  grid_->pipe_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  grid_->tensor_comm()->all_reduce(squares, comm::ReduceOp::kSum);
  return std::sqrt(squares.item<double>());
}

bool MixedPrecisionOptimizer::any_overflow() const {
  if (dtype_ != at::kHalf) return false;
  // One pass on the device: a norm is finite exactly when its tensor is (up to a sum of
  // squares past the float range, which DeepSpeed's check also counts as an overflow).
  std::vector<at::Tensor> grads;
  for (const auto& master : masters_->tensors()) {
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

void MixedPrecisionOptimizer::clip(double norm) {
  const double coefficient = clipping_ / (norm + kClipEpsilon);
  if (!(clipping_ > 0 && coefficient < 1.0)) return;  // also when the norm is NaN
  for (const auto& master : masters_->tensors()) {
    if (master.grad().defined()) master.mutable_grad().mul_(coefficient);
  }
}

int64_t MixedPrecisionOptimizer::state_bytes() {
  int64_t bytes = masters_->master_bytes();
  for (const auto& master : masters_->tensors()) {
    for (const auto& [key, tensor] : optim::optimizer_state(*optimizer_, master))
      bytes += static_cast<int64_t>(tensor.nbytes());
  }
  return bytes;
}

std::vector<ParameterState> MixedPrecisionOptimizer::whole_state() {
  return masters_->whole_state(*optimizer_);
}

ParameterState MixedPrecisionOptimizer::gathered_state(std::size_t position) {
  return masters_->gathered_state(*optimizer_, position);
}

void MixedPrecisionOptimizer::restore(const std::vector<ParameterState>& whole) {
  masters_->restore(whole, *optimizer_);
  masters_->copy_to_model();
}

}  // namespace pipetrain::optim
