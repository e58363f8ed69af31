#include "trainer/objectives/policy_gradient.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::trainer {
namespace {

// Each counted token's loss, [rows, positions], 0 elsewhere.
at::Tensor token_objective(const ObjectiveConfig& o, const at::Tensor& logprobs,
                           const comm::TensorList& labels, const at::Tensor& mask,
                           PolicyStatistics& statistics) {
  const at::Tensor advantages = labels.at(1).to(logprobs.dtype());
  const at::Tensor given_old = labels.at(2).to(logprobs.dtype());
  // On-policy where no old log-probability is given: the ratio is 1, its gradient the policy's.
  // Only the counted tokens' numbers enter (others could overflow exp and make 0 x inf).
  const at::Tensor counted = mask.gt(0);
  const at::Tensor own = given_old.isnan() | ~counted;
  const at::Tensor old = at::where(own, logprobs.detach(), given_old);
  const at::Tensor ratio = (logprobs - old).exp();
  const at::Tensor clipped = ratio.clamp(1 - o.epsilon, 1 + o.upper_epsilon());
  statistics.add((logprobs.detach() - old).abs().masked_fill(~counted, 0).max(),
                 (clipped.ne(ratio.detach()) & counted).sum(), counted.sum());
  at::Tensor loss = -at::min(ratio * advantages, clipped * advantages);
  if (o.kl_beta() != 0) {
    const at::Tensor gap =
        at::where(counted, labels.at(3).to(logprobs.dtype()) - logprobs, at::zeros_like(logprobs));
    loss = loss + o.kl_beta() * ((gap.exp() - gap - 1) * ratio);
  }
  return loss * mask;
}

}  // namespace

void PolicyStatistics::add(const at::Tensor& largest_gap, const at::Tensor& clipped,
                           const at::Tensor& tokens) {
  // Kept where the numbers are (in float64), copied to the host once, at take().
  const at::Tensor gap = largest_gap.to(at::kDouble).reshape({1});
  const at::Tensor sums = at::stack({clipped.to(at::kDouble), tokens.to(at::kDouble)});
  largest_gap_ = largest_gap_.defined() ? at::maximum(largest_gap_, gap) : gap;
  sums_ = sums_.defined() ? sums_ + sums : sums;
}

std::map<std::string, double> PolicyStatistics::take(comm::Communicator& ranks, bool counts) {
  const bool any = counts && sums_.defined();
  at::Tensor gap = any ? largest_gap_.to(at::kCPU).clone() : at::zeros({1}, at::kDouble);
  at::Tensor sums = any ? sums_.to(at::kCPU).clone() : at::zeros({2}, at::kDouble);
  clear();
  ranks.all_reduce(gap, comm::ReduceOp::kMax);
  ranks.all_reduce(sums, comm::ReduceOp::kSum);
  return {{"logprobs/largest_gap", gap[0].item<double>()},
          {"clip_ratio", sums[0].item<double>() / std::max(sums[1].item<double>(), 1.0)}};
}

module::LossFunction policy_gradient_loss(module::LossFunction token_losses,
                                          const ObjectiveConfig& objective, bool summed,
                                          std::shared_ptr<PolicyStatistics> statistics) {
  return [token_losses = std::move(token_losses), objective, summed,
          statistics = std::move(statistics)](const module::Activation& outputs,
                                              const comm::TensorList& labels) {
    const at::Tensor& tokens = labels.at(0);
    const at::Tensor logprobs = -token_losses(outputs, {tokens});
    const at::Tensor mask = tokens.ne(tensor_parallel::kIgnoreIndex).to(logprobs.dtype());
    const at::Tensor loss = token_objective(objective, logprobs, labels, mask, *statistics);
    if (summed) return loss.sum();
    if (objective.policy_loss == PolicyLoss::kDrGrpo)
      return loss.sum() / static_cast<double>(tokens.size(0) * objective.max_completion_length);
    return (loss.sum(1) / mask.sum(1).clamp_min(1)).mean();  // grpo
  };
}

}  // namespace pipetrain::trainer
