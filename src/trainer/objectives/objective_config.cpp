#include "trainer/objectives/objective_config.h"

namespace pipetrain::trainer {

const config::KeyTable<ObjectiveConfig>& objective_keys() {
  static const config::KeyTable<ObjectiveConfig> table = [] {
    config::KeyTable<ObjectiveConfig> t;
    t.choice("objective.type", PIPETRAIN_FIELD(type),
             config::Names<ObjectiveType>{{"language_model", ObjectiveType::kLanguageModel},
                                          {"dpo", ObjectiveType::kDpo}},
             "what training minimises: the next-token loss (`language_model`), or DPO over "
             "preference pairs (`dpo`: data from `prepare-data --preference`)")
        .when([](const ObjectiveConfig& c) { return c.preference(); },
              "with objective.type \"dpo\"")
        .number("objective.beta", PIPETRAIN_FIELD(beta),
                "DPO's beta: how far the policy may move from the reference (TRL's `beta`)",
                config::above(0))
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
        .check([](const ObjectiveConfig& c) {
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
