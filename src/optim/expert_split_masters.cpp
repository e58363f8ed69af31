#include "optim/expert_split_masters.h"

#include <stdexcept>

namespace pipetrain::optim {

ExpertSplitMasters::ExpertSplitMasters(std::shared_ptr<ShardedMasters> dense,
                                       std::shared_ptr<MasterWeights> experts,
                                       const std::vector<bool>& is_expert)
    : dense_(std::move(dense)), experts_(std::move(experts)) {
  std::size_t dense_count = 0, expert_count = 0;
  for (const bool expert : is_expert)
    places_.push_back({expert, expert ? expert_count++ : dense_count++});
  tensors_ = dense_->tensors();
  tensors_.insert(tensors_.end(), experts_->tensors().begin(), experts_->tensors().end());
}

void ExpertSplitMasters::take_gradients(double unscale) {
  dense_->take_gradients(unscale);
  experts_->take_gradients(unscale);
}

void ExpertSplitMasters::apply_weight_decay(const optim::WeightDecay& decay, double lr) {
  dense_->apply_weight_decay(decay, lr);
  experts_->apply_weight_decay(decay, lr);
}

at::Tensor ExpertSplitMasters::squared_grad_norm() const {
  return dense_->squared_grad_norm() + experts_->squared_grad_norm();
}

void ExpertSplitMasters::copy_to_model() {
  dense_->copy_to_model();
  experts_->copy_to_model();
}

void ExpertSplitMasters::clear_model_gradients() {
  dense_->clear_model_gradients();
  experts_->clear_model_gradients();
}

int64_t ExpertSplitMasters::master_bytes() const {
  return dense_->master_bytes() + experts_->master_bytes();
}

std::vector<ParameterState> ExpertSplitMasters::whole_state(
    torch::optim::Optimizer& optimizer) const {
  const std::vector<ParameterState> dense = dense_->whole_state(optimizer);
  const std::vector<ParameterState> experts = experts_->whole_state(optimizer);
  std::vector<ParameterState> whole;
  for (const Place& place : places_)
    whole.push_back((place.expert ? experts : dense).at(place.index));
  return whole;
}

ParameterState ExpertSplitMasters::gathered_state(torch::optim::Optimizer& optimizer,
                                                  std::size_t position) const {
  const Place& place = places_.at(position);
  return place.expert ? experts_->gathered_state(optimizer, place.index)
                      : dense_->gathered_state(optimizer, place.index);
}

void ExpertSplitMasters::restore(const std::vector<ParameterState>& whole,
                                 torch::optim::Optimizer& optimizer) {
  if (whole.size() != places_.size())
    throw std::invalid_argument("restore needs one state per parameter");
  std::vector<ParameterState> dense, experts;
  for (std::size_t i = 0; i < places_.size(); ++i)
    (places_[i].expert ? experts : dense).push_back(whole[i]);
  dense_->restore(dense, optimizer);
  experts_->restore(experts, optimizer);
}

}  // namespace pipetrain::optim
