#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pipetrain/config/key_table.h"

namespace pipetrain::trainer {

// What a training step minimises: the language model's next-token loss, a preference
// objective over pairs of answers, or a policy-gradient objective over rollouts given as data
// (`objective` section).
enum class ObjectiveType { kLanguageModel, kDpo, kPolicyGradient };

// DPO's loss on a pair's margin d = (chosen - reference) - (rejected - reference), as TRL's
// DPOTrainer computes it: sigmoid -log sigma(beta d), hinge relu(1 - beta d), ipo the
// squared distance of the per-token margin from 1 / (2 beta).
enum class DpoLoss { kSigmoid, kHinge, kIpo };

// Where the reference model's log-probabilities come from: a frozen checkpoint scored once
// before the first step, the base model under the LoRA adapters (the same: its weights are
// frozen), or a `pipetrain logprobs` file of the same data.
enum class ReferenceKind { kFrozen, kAdaptersOff, kPrecomputed };

// How a policy-gradient step normalises its per-token losses, as TRL's GRPOTrainer: `grpo`
// each sequence's mean, then the mean over sequences; `dr_grpo` the sum over the batch's
// sequences x max_completion_length; `dapo` the mean over the global batch's tokens.
enum class PolicyLoss { kGrpo, kDrGrpo, kDapo };

struct ObjectiveConfig {
  ObjectiveType type = ObjectiveType::kLanguageModel;
  // DPO's beta (default 0.1), or the policy gradient's KL coefficient (default 0).
  std::optional<double> beta;
  DpoLoss loss_type = DpoLoss::kSigmoid;
  // Conservative DPO's probability that a pair's labels are flipped (sigmoid only).
  double label_smoothing = 0;
  ReferenceKind reference = ReferenceKind::kFrozen;
  // The reference's checkpoint; empty: the one `load` names (a DPO run's own reference when
  // `load` resumes one).
  std::string reference_checkpoint;
  std::string reference_logprobs;  // with reference "precomputed"

  // Policy gradient on rollouts (TRL's GRPOTrainer): the clipped ratio's bounds 1 - epsilon
  // and 1 + epsilon_high (0: epsilon), the normalisation, dr_grpo's length, the rollouts file.
  PolicyLoss policy_loss = PolicyLoss::kDapo;
  double epsilon = 0.2;
  double epsilon_high = 0;
  int64_t max_completion_length = 512;  // TRL 1.16's default
  std::string rollouts;

  bool preference() const { return type == ObjectiveType::kDpo; }
  bool policy_gradient() const { return type == ObjectiveType::kPolicyGradient; }
  double dpo_beta() const { return beta.value_or(0.1); }
  double kl_beta() const { return beta.value_or(0.0); }
  double upper_epsilon() const { return epsilon_high > 0 ? epsilon_high : epsilon; }
};

const config::KeyTable<ObjectiveConfig>& objective_keys();

}  // namespace pipetrain::trainer
