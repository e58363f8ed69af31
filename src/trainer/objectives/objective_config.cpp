#include "trainer/objectives/objective_config.h"

namespace pipetrain::trainer {

const config::KeyTable<ObjectiveConfig>& objective_keys() {
  static const config::KeyTable<ObjectiveConfig> table = [] {
    config::KeyTable<ObjectiveConfig> t;
    t.choice("objective.type", PIPETRAIN_FIELD(type),
             config::Names<ObjectiveType>{{"language_model", ObjectiveType::kLanguageModel},
                                          {"dpo", ObjectiveType::kDpo},
                                          {"policy_gradient", ObjectiveType::kPolicyGradient}},
             "what training minimises: the next-token loss (`language_model`), DPO over "
             "preference pairs (`dpo`: data from `prepare-data --preference`), or clipped "
             "policy-gradient steps on rollouts given as data (`policy_gradient`, as TRL's "
             "GRPOTrainer)")
        .when([](const ObjectiveConfig& c) { return c.type != ObjectiveType::kLanguageModel; },
              "with objective.type \"dpo\" or \"policy_gradient\"")
        .custom(
            "objective.beta", "number",
            "DPO's beta, how far the policy may move from the reference (default 0.1); the "
            "policy gradient's KL coefficient (default 0: no reference)",
            [](const std::string& key, const nlohmann::json& v, ObjectiveConfig& c) {
              c.beta = config::read_number(key, v, config::Range{.min = 0});
            },
            [](const ObjectiveConfig& c) {
              return nlohmann::json(c.preference() ? c.dpo_beta() : c.kl_beta());
            })
        .when([](const ObjectiveConfig& c) { return c.preference(); },
              "with objective.type \"dpo\"")
        .choice(
            "objective.loss_type", PIPETRAIN_FIELD(loss_type),
            config::Names<DpoLoss>{
                {"sigmoid", DpoLoss::kSigmoid}, {"hinge", DpoLoss::kHinge}, {"ipo", DpoLoss::kIpo}},
            "DPO's loss on each pair's margin, as TRL's `loss_type`")
        .number("objective.label_smoothing", PIPETRAIN_FIELD(label_smoothing),
                "conservative DPO: the probability that a pair's labels are flipped (sigmoid "
                "only; TRL 1.16's sigmoid ignores it, its `robust` loss uses it)",
                config::Range{.min = 0, .max = 0.5, .exclusive_max = true})
        .choice("objective.reference", PIPETRAIN_FIELD(reference),
                config::Names<ReferenceKind>{{"frozen", ReferenceKind::kFrozen},
                                             {"adapters_off", ReferenceKind::kAdaptersOff},
                                             {"precomputed", ReferenceKind::kPrecomputed}},
                "the reference model's log-probabilities: a frozen checkpoint's "
                "(`objective.reference_checkpoint`), the base under the LoRA adapters' "
                "(`adapters_off`), both scored once before the first step, or a `pipetrain "
                "logprobs` file of the same data (`precomputed`)")
        .text("objective.reference_checkpoint", PIPETRAIN_FIELD(reference_checkpoint),
              "the reference's checkpoint (frozen, adapters_off); empty: the one `load` names, "
              "or, resuming a DPO run, the reference it trained against")
        .text("objective.reference_logprobs", PIPETRAIN_FIELD(reference_logprobs),
              "with reference `precomputed`: the file `pipetrain logprobs` wrote for the "
              "training data (its `sequence_logprobs`)")
        .when([](const ObjectiveConfig& c) { return c.policy_gradient(); },
              "with objective.type \"policy_gradient\"")
        .choice("objective.loss_type", PIPETRAIN_FIELD(policy_loss),
                config::Names<PolicyLoss>{{"grpo", PolicyLoss::kGrpo},
                                          {"dr_grpo", PolicyLoss::kDrGrpo},
                                          {"dapo", PolicyLoss::kDapo}},
                "how the per-token losses are normalised, as TRL's GRPO `loss_type`: each "
                "sequence's mean averaged (`grpo`), the sum over sequences x "
                "`max_completion_length` (`dr_grpo`), the mean over the global batch's "
                "completion tokens (`dapo`, TRL's default)")
        .number("objective.epsilon", PIPETRAIN_FIELD(epsilon),
                "the ratio's lower clip: 1 - epsilon (TRL's `epsilon`)", config::above(0))
        .number("objective.epsilon_high", PIPETRAIN_FIELD(epsilon_high),
                "the ratio's upper clip: 1 + epsilon_high; 0: epsilon (TRL's `epsilon_high`)",
                config::Range{.min = 0})
        .integer("objective.max_completion_length", PIPETRAIN_FIELD(max_completion_length),
                 "dr_grpo's constant length (TRL's `max_completion_length`)", config::at_least(1))
        .text(
            "objective.rollouts", PIPETRAIN_FIELD(rollouts),
            "the rollouts' numbers beside the tokens of data.paths (empty: a Python program "
            "feeds the rollouts, as examples/python/grpo_loop.py): a safetensors file of `offsets` "
            "(int64 [examples + 1]), `advantages` (float32, one per example or per token), "
            "and per token as `pipetrain logprobs` writes them `old_logprobs` (absent: the "
            "policy's own, on-policy) and `ref_logprobs` (needed with beta)")
        .check([](const ObjectiveConfig& c) {
          if (c.preference() && c.dpo_beta() <= 0)
            config::throw_input_error("objective.beta must be above 0 for DPO");
          if (!c.preference()) return;
          if (c.label_smoothing > 0 && c.loss_type != DpoLoss::kSigmoid)
            config::throw_input_error(
                "objective.label_smoothing applies to loss_type \"sigmoid\" only");
          const bool file = c.reference == ReferenceKind::kPrecomputed;
          if (file && c.reference_logprobs.empty())
            config::throw_input_error(
                "objective.reference \"precomputed\" needs objective.reference_logprobs (a "
                "`pipetrain logprobs` file of the training data)");
          if (!file && !c.reference_logprobs.empty())
            config::throw_input_error(
                "objective.reference_logprobs is read with objective.reference "
                "\"precomputed\" only");
          if (file && !c.reference_checkpoint.empty())
            config::throw_input_error(
                "objective.reference_checkpoint: a precomputed reference has its "
                "log-probabilities in objective.reference_logprobs");
        });
    return t;
  }();
  return table;
}

}  // namespace pipetrain::trainer
