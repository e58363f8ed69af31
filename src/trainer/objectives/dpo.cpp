#include "trainer/objectives/dpo.h"

#include <ATen/ATen.h>

#include <vector>

#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::trainer {
namespace {

double sum_of(const at::Tensor& t) {
  return t.to(at::kCPU, at::kDouble).sum().item<double>();
}

// Each row's log-probability of its counted tokens, [rows]: a row at a time through the
// model's summed loss (under tensor parallelism a collective per row, alike on every rank).
at::Tensor row_logprobs(const module::LossFunction& token_sum, const at::Tensor& logits,
                        const at::Tensor& labels) {
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < logits.size(0); ++i)
    rows.push_back(-token_sum({logits.slice(0, i, i + 1)}, {labels.slice(0, i, i + 1)}));
  return at::stack(rows);
}

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

void PreferenceStatistics::add(const at::Tensor& chosen_rewards, const at::Tensor& rejected_rewards,
                               const at::Tensor& chosen_logps, const at::Tensor& rejected_logps) {
  sums_[0] += static_cast<double>(chosen_rewards.numel());
  sums_[1] += sum_of(chosen_rewards);
  sums_[2] += sum_of(rejected_rewards);
  sums_[3] += sum_of(chosen_rewards.gt(rejected_rewards));
  sums_[4] += sum_of(chosen_rewards - rejected_rewards);
  sums_[5] += sum_of(chosen_logps);
  sums_[6] += sum_of(rejected_logps);
}

std::map<std::string, double> PreferenceStatistics::take(comm::Communicator& ranks, bool counts) {
  std::array<double, 7> mine{};
  if (counts) mine = sums_;
  clear();
  at::Tensor totals = at::tensor(std::vector<double>(mine.begin(), mine.end()), at::kDouble);
  ranks.all_reduce(totals, comm::ReduceOp::kSum);
  const double pairs = std::max(totals[0].item<double>(), 1.0);
  auto mean = [&](int i) { return totals[i].item<double>() / pairs; };
  return {{"rewards/chosen", mean(1)},     {"rewards/rejected", mean(2)},
          {"rewards/accuracies", mean(3)}, {"rewards/margins", mean(4)},
          {"logps/chosen", mean(5)},       {"logps/rejected", mean(6)}};
}

module::LossFunction dpo_loss(module::LossFunction token_sum, const ObjectiveConfig& objective,
                              std::shared_ptr<PreferenceStatistics> statistics) {
  return [token_sum = std::move(token_sum), objective, statistics = std::move(statistics)](
             const module::Activation& outputs, const comm::TensorList& labels) {
    const at::Tensor& tokens = labels.at(0);
    const at::Tensor policy = row_logprobs(token_sum, outputs.at(0), tokens);
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
