#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "optim/sharded_masters.h"
#include "pipetrain/optim/master_weights.h"

namespace pipetrain::optim {

// ZeRO beside expert parallelism: the parameters every data-parallel rank holds are
// sharded over the data-parallel group (ShardedMasters, any stage); the experts split over
// the expert-parallel group are sharded over the ranks holding the same experts (the
// expert-data group: a ShardedMasters at ZeRO 1, their weights whole) or, when one rank
// holds them, kept whole (ReplicatedMasters). So the dense part's state shrinks with the
// data size, and the experts' with the expert size times the expert-data size: with the
// data size too.
// Positions (whole_state, gathered_state, restore) are those of all the parameters the
// two parts were built over, in the order given here.
class ExpertSplitMasters : public MasterWeights {
 public:
  // `dense` and `experts`: the two parts; `is_expert`: per parameter, in the module's
  // order, the part it went to (each part holds its own in that order).
  ExpertSplitMasters(std::shared_ptr<ShardedMasters> dense, std::shared_ptr<MasterWeights> experts,
                     const std::vector<bool>& is_expert);

  const std::vector<at::Tensor>& tensors() const override { return tensors_; }
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

 private:
  // A position among all the parameters: which part holds it, and where there.
  struct Place {
    bool expert;
    std::size_t index;
  };

  std::shared_ptr<ShardedMasters> dense_;
  std::shared_ptr<MasterWeights> experts_;
  std::vector<Place> places_;
  std::vector<at::Tensor> tensors_;  // the dense part's, then the experts'
};

}  // namespace pipetrain::optim
