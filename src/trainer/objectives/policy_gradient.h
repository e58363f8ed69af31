#pragma once

#include <memory>

#include "pipetrain/module/pipeline_module.h"
#include "trainer/objectives/objective_config.h"
#include "trainer/objectives/objective_statistics.h"

namespace pipetrain::trainer {

// What a policy-gradient step saw of its rollouts: `logprobs/largest_gap`, the largest
// difference between a completion token's log-probability as the trainer computes it and
// the old one given with the rollout (the generator's, in an on-policy loop: it should be
// rounding), and `clip_ratio`, the share of completion tokens whose ratio was clipped.
class PolicyStatistics : public ObjectiveStatistics {
 public:
  // A micro-batch's largest |log p - old log p| over its counted tokens, how many of them
  // were clipped, and how many count (scalars, where the loss computed them).
  void add(const at::Tensor& largest_gap, const at::Tensor& clipped, const at::Tensor& tokens);
  std::map<std::string, double> take(comm::Communicator& ranks, bool counts) override;
  void clear() override { largest_gap_ = sums_ = at::Tensor(); }

 private:
  // float64 where the loss ran (undefined: nothing since the last take): the largest gap [1];
  // clipped tokens and counted tokens [2].
  at::Tensor largest_gap_, sums_;
};

// A policy-gradient step's loss on a micro-batch of rollouts (data::RolloutSource), as TRL's
// GRPOTrainer computes it: each completion token's ratio r = exp(log p - old log p) (the
// policy's own, detached, where no old one is given), its loss -min(r A, clip(r, 1 - epsilon,
// 1 + epsilon_high) A) plus beta x the k3 estimate of the KL to the reference times r (TRL's
// bias correction), normalised as objective.loss_type says: `grpo` the mean over rows of
// each row's mean, `dr_grpo` the sum over rows x max_completion_length. For `dapo` it is the
// sum over the micro-batch's tokens (`summed`), which the engine scales to a mean over the
// global batch's tokens (engine::TrainingConfig::per_token_loss). `token_losses` is the
// model's per-token loss (minus each label's log-probability).
module::LossFunction policy_gradient_loss(module::LossFunction token_losses,
                                          const ObjectiveConfig& objective, bool summed,
                                          std::shared_ptr<PolicyStatistics> statistics);

}  // namespace pipetrain::trainer
