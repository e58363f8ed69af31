#pragma once

#include <string>

#include "pipetrain/config/key_table.h"

namespace pipetrain::trainer {

// What a training step minimises: the language model's next-token loss, or a preference
// objective over pairs of answers (`objective` section).
enum class ObjectiveType { kLanguageModel, kDpo };

// DPO's loss on a pair's margin d = (chosen - reference) - (rejected - reference), as TRL's
// DPOTrainer computes it: sigmoid -log sigma(beta d), hinge relu(1 - beta d), ipo the
// squared distance of the per-token margin from 1 / (2 beta).
enum class DpoLoss { kSigmoid, kHinge, kIpo };

// Where the reference model's log-probabilities come from: a frozen checkpoint scored once
// before the first step, the base model under the LoRA adapters (the same: its weights are
// frozen), or a `pipetrain logprobs` file of the same data.
enum class ReferenceKind { kFrozen, kAdaptersOff, kPrecomputed };

struct ObjectiveConfig {
  ObjectiveType type = ObjectiveType::kLanguageModel;
  double beta = 0.1;
  DpoLoss loss_type = DpoLoss::kSigmoid;
  // Conservative DPO's probability that a pair's labels are flipped (sigmoid only).
  double label_smoothing = 0;
  ReferenceKind reference = ReferenceKind::kFrozen;
  // The reference's checkpoint; empty: the one `load` names (a DPO run's own reference when
  // `load` resumes one).
  std::string reference_checkpoint;
  std::string reference_logprobs;  // with reference "precomputed"

  bool preference() const { return type == ObjectiveType::kDpo; }
};

const config::KeyTable<ObjectiveConfig>& objective_keys();

}  // namespace pipetrain::trainer
