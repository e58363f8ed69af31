#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "pipetrain/optim/master_weights.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::optim {

// Stage 0: every replica keeps an fp32 master of each of its parameters (the parameter
// itself when the model is fp32); GradientSync has already averaged the gradients.
class ReplicatedMasters : public MasterWeights {
 public:
  // `norm_parameters`: those counted in the global norm on this rank (see GradientSync);
  // `decayed`: per parameter, whether weight decay applies to it; `experts`: parameters
  // split over the expert-parallel group, whose part of the norm is summed over it.
  ReplicatedMasters(const std::vector<at::Tensor>& parameters,
                    const std::vector<at::Tensor>& norm_parameters, std::vector<bool> decayed,
                    std::shared_ptr<const topology::Grid> grid,
                    const std::vector<at::Tensor>& experts = {});

  const std::vector<at::Tensor>& tensors() const override { return masters_; }
  void take_gradients(double unscale) override;
  void apply_weight_decay(const optim::WeightDecay& decay, double lr) override;
  at::Tensor squared_grad_norm() const override;
  void copy_to_model() override;
  void clear_model_gradients() override;
  int64_t master_bytes() const override;
  std::vector<ParameterState> whole_state(torch::optim::Optimizer& optimizer) const override;
  ParameterState gathered_state(torch::optim::Optimizer& optimizer,
                                std::size_t position) const override;
  void restore(const std::vector<ParameterState>& whole,
               torch::optim::Optimizer& optimizer) override;

  const at::Tensor& master_of(const at::Tensor& parameter) const;

 private:
  std::shared_ptr<const topology::Grid> grid_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> masters_;  // one per parameter, same order
  std::vector<bool> decayed_;        // the same
  std::vector<at::Tensor> norm_masters_;
  std::vector<at::Tensor> expert_norm_masters_;  // counted over the expert-parallel group
};

}  // namespace pipetrain::optim
