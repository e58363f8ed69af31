#include "trainer/objectives/policy_gradient.h"

#include <ATen/ATen.h>

#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::trainer {
namespace {

// Each counted token's loss, [rows, positions], 0 elsewhere.
at::Tensor token_objective(const ObjectiveConfig& o, const at::Tensor& logprobs,
                           const comm::TensorList& labels, const at::Tensor& mask) {
  const at::Tensor advantages = labels.at(1).to(logprobs.dtype());
  const at::Tensor given_old = labels.at(2).to(logprobs.dtype());
  // On-policy where no old log-probability is given: the ratio is 1, its gradient the policy's.
  const at::Tensor old = at::where(given_old.isnan(), logprobs.detach(), given_old);
  const at::Tensor ratio = (logprobs - old).exp();
  const at::Tensor clipped = ratio.clamp(1 - o.epsilon, 1 + o.upper_epsilon());
  at::Tensor loss = -at::min(ratio * advantages, clipped * advantages);
  if (o.kl_beta() != 0) {
    const at::Tensor gap = labels.at(3).to(logprobs.dtype()) - logprobs;
    loss = loss + o.kl_beta() * ((gap.exp() - gap - 1) * ratio);
  }
  return loss * mask;
}

}  // namespace

module::LossFunction policy_gradient_loss(module::LossFunction token_losses,
                                          const ObjectiveConfig& objective, bool summed) {
  return [token_losses = std::move(token_losses), objective, summed](
             const module::Activation& outputs, const comm::TensorList& labels) {
    const at::Tensor& tokens = labels.at(0);
    const at::Tensor logprobs = -token_losses(outputs, {tokens});
    const at::Tensor mask = tokens.ne(tensor_parallel::kIgnoreIndex).to(logprobs.dtype());
    const at::Tensor loss = token_objective(objective, logprobs, labels, mask);
    if (summed) return loss.sum();
    if (objective.policy_loss == PolicyLoss::kDrGrpo)
      return loss.sum() / static_cast<double>(tokens.size(0) * objective.max_completion_length);
    return (loss.sum(1) / mask.sum(1).clamp_min(1)).mean();  // grpo
  };
}

}  // namespace pipetrain::trainer
