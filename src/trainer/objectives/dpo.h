#pragma once

#include <array>
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
  void clear() override { sums_.fill(0); }

 private:
  // pairs, rewards chosen, rewards rejected, accurate, margins, logps chosen, logps rejected
  std::array<double, 7> sums_{};
};

// DPO's loss of a micro-batch whose rows are pairs (chosen, rejected; data::PairSource),
// the mean over its pairs, from `token_sum` (the model's next-token loss summed over the
// tokens that count: minus a row's log-probability) and the reference's log-probabilities
// (labels[1]); `statistics` collects the metrics.
module::LossFunction dpo_loss(module::LossFunction token_sum, const ObjectiveConfig& objective,
                              std::shared_ptr<PreferenceStatistics> statistics);

}  // namespace pipetrain::trainer
