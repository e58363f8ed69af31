#pragma once

#include <map>
#include <memory>
#include <string>

#include "pipetrain/module/pipeline_module.h"
#include "trainer/objectives/objective_config.h"
#include "trainer/objectives/objective_statistics.h"

namespace pipetrain::trainer {

// What the DPO loss saw of a step's pairs, for TRL's metrics (`rewards/chosen`,
// `rewards/rejected`, `rewards/accuracies`, `rewards/margins`, `logps/chosen`,
// `logps/rejected`): sums over the pairs this rank's loss computed since the last take.
class PreferenceStatistics : public ObjectiveStatistics {
 public:
  // Per pair (detached): beta x the log-ratios to the reference, the policy's log-probs.
  void add(const at::Tensor& chosen_rewards, const at::Tensor& rejected_rewards,
           const at::Tensor& chosen_logps, const at::Tensor& rejected_logps);
  // The means over every pair since the last take, each pair counted once.
  std::map<std::string, double> take(comm::Communicator& ranks, bool counts) override;
  void clear() override { sums_ = at::Tensor(); }

 private:
  // pairs, rewards chosen, rewards rejected, accurate, margins, logps chosen, logps rejected,
  // float64 where the rewards are (undefined: none since the last take)
  at::Tensor sums_;
};

// Each row's summed log-probability of its counted tokens, [rows], from the model's per-token
// losses (BuiltinModel::token_losses): how DPO scores the policy and, so that a reference
// equal to it gives its numbers to the last bit, the reference.
at::Tensor row_logprobs(const module::LossFunction& token_losses, const at::Tensor& logits,
                        const at::Tensor& labels);

// DPO's loss of a micro-batch whose rows are pairs (chosen, rejected; data::PairSource),
// the mean over its pairs, from `token_losses` (the model's per-token losses: row_logprobs)
// and the reference's log-probabilities (labels[1]); `statistics` collects the metrics.
module::LossFunction dpo_loss(module::LossFunction token_losses, const ObjectiveConfig& objective,
                              std::shared_ptr<PreferenceStatistics> statistics);

}  // namespace pipetrain::trainer
