#include "trainer/objectives/dpo.h"

#include <ATen/ATen.h>

#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::trainer {
namespace {

at::Tensor pair_loss(const ObjectiveConfig& o, const at::Tensor& chosen_ratio,
                     const at::Tensor& rejected_ratio, const at::Tensor& labels) {
  const at::Tensor margin = o.dpo_beta() * (chosen_ratio - rejected_ratio);
  switch (o.loss_type) {
    case DpoLoss::kSigmoid:
      return -(1 - o.label_smoothing) * at::log_sigmoid(margin) -
             o.label_smoothing * at::log_sigmoid(-margin);
    case DpoLoss::kHinge:
      return at::relu(1 - margin);
    case DpoLoss::kIpo: {
      // TRL's: each answer's log-ratio per completion token.
      const at::Tensor counted =
          labels.ne(tensor_parallel::kIgnoreIndex).sum(1).clamp_min(1).to(chosen_ratio.dtype());
      const int64_t rows = labels.size(0);
      const at::Tensor per_token = chosen_ratio / counted.slice(0, 0, rows, 2) -
                                   rejected_ratio / counted.slice(0, 1, rows, 2);
      return (per_token - 1 / (2 * o.dpo_beta())).pow(2);
    }
  }
  throw std::logic_error("an unknown DPO loss type");
}

}  // namespace

at::Tensor row_logprobs(const module::LossFunction& token_losses, const at::Tensor& logits,
                        const at::Tensor& labels) {
  return -token_losses({logits}, {labels}).sum(1);
}

void PreferenceStatistics::add(const at::Tensor& chosen_rewards, const at::Tensor& rejected_rewards,
                               const at::Tensor& chosen_logps, const at::Tensor& rejected_logps) {
  // Summed where the numbers are (in float64), copied to the host once, at take().
  const at::Tensor chosen = chosen_rewards.to(at::kDouble);
  const at::Tensor rejected = rejected_rewards.to(at::kDouble);
  const at::Tensor sums = at::stack(
      {at::full({}, static_cast<double>(chosen.numel()), chosen.options()), chosen.sum(),
       rejected.sum(), chosen.gt(rejected).to(at::kDouble).sum(), (chosen - rejected).sum(),
       chosen_logps.to(at::kDouble).sum(), rejected_logps.to(at::kDouble).sum()});
  sums_ = sums_.defined() ? sums_ + sums : sums;
}

std::map<std::string, double> PreferenceStatistics::take(comm::Communicator& ranks, bool counts) {
  at::Tensor totals =
      counts && sums_.defined() ? sums_.to(at::kCPU).clone() : at::zeros({7}, at::kDouble);
  clear();
  ranks.all_reduce(totals, comm::ReduceOp::kSum);
  const double pairs = std::max(totals[0].item<double>(), 1.0);
  auto mean = [&](int i) { return totals[i].item<double>() / pairs; };
  return {{"rewards/chosen", mean(1)},     {"rewards/rejected", mean(2)},
          {"rewards/accuracies", mean(3)}, {"rewards/margins", mean(4)},
          {"logps/chosen", mean(5)},       {"logps/rejected", mean(6)}};
}

module::LossFunction dpo_loss(module::LossFunction token_losses, const ObjectiveConfig& objective,
                              std::shared_ptr<PreferenceStatistics> statistics) {
  return [token_losses = std::move(token_losses), objective, statistics = std::move(statistics)](
             const module::Activation& outputs, const comm::TensorList& labels) {
    const at::Tensor& tokens = labels.at(0);
    const at::Tensor policy = row_logprobs(token_losses, outputs.at(0), tokens);
    const at::Tensor reference = labels.at(1).to(policy.dtype());
    const int64_t rows = policy.size(0);
    const at::Tensor chosen = policy.slice(0, 0, rows, 2), rejected = policy.slice(0, 1, rows, 2);
    const at::Tensor chosen_ratio = chosen - reference.slice(0, 0, rows, 2);
    const at::Tensor rejected_ratio = rejected - reference.slice(0, 1, rows, 2);
    statistics->add(objective.dpo_beta() * chosen_ratio.detach(),
                    objective.dpo_beta() * rejected_ratio.detach(), chosen.detach(),
                    rejected.detach());
    return pair_loss(objective, chosen_ratio, rejected_ratio, tokens).mean();
  };
}

}  // namespace pipetrain::trainer
