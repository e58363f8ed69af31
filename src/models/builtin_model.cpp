#include "pipetrain/models/builtin_model.h"

#include <ATen/ATen.h>

#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

// The families `can` accepts, for a message: model.type "gpt", "llama" or ...
std::string families_that(const std::function<bool(const Capabilities&)>& can) {
  return family_list([&](const FamilyRow& row) {
    if (!row.capabilities) return false;
    ModelConfig config;
    config.type = &row;  // a mixture's defaults route to experts
    return can(row.capabilities(config));
  });
}

// Refuses the groups the model cannot split over, naming the families that can.
void check_groups(const ModelConfig& config, const ModelGroups& groups) {
  const Capabilities can = capabilities(config);
  const std::string named = "\"" + type_name(config) + "\"";
  if (groups.tensor.parallel() && !can.tensor_parallel)
    throw io::InputError("model_parallel " + std::to_string(groups.tensor.size()) +
                         " needs a model with tensor-parallel layers (model.type " +
                         families_that([](const Capabilities& c) { return c.tensor_parallel; }) +
                         "), not " + named);
  if (groups.tensor.parallel() && groups.tensor.sequence_parallel && !can.sequence_parallel)
    throw io::InputError("sequence_parallel needs model.type " +
                         families_that([](const Capabilities& c) { return c.sequence_parallel; }) +
                         ", not " + named +
                         (can.routed_experts > 0 ? " (its router takes whole sequences)" : ""));
  if (groups.context.parallel() && !can.context_parallel)
    throw io::InputError("context_parallel " + std::to_string(groups.context.size()) +
                         " splits sequences for attention: it needs model.type " +
                         families_that([](const Capabilities& c) { return c.context_parallel; }) +
                         ", not " + named +
                         (can.routed_experts > 0 ? " (its router takes whole sequences)" : ""));
  if (groups.experts.parallel() && can.routed_experts == 0)
    throw io::InputError("expert_parallel " + std::to_string(groups.experts.size()) +
                         " splits experts: it needs model.type " +
                         families_that([](const Capabilities& c) { return c.routed_experts > 0; }) +
                         ", not " + named);
}

}  // namespace

BuiltinModel language_model(std::vector<module::LayerSpec> layers, const ModelGroups& groups,
                            int64_t vocab_size, int64_t context) {
  return {std::move(layers),
          gpt_loss(groups.tensor, groups.context),
          [vocab_size, context](int64_t batch) {
            return module::Activation{at::randint(vocab_size, {batch, context}, at::kLong)};
          },
          TokenInput{vocab_size, context},
          gpt_loss(groups.tensor, groups.context, tensor_parallel::TokenReduction::kSum),
          gpt_loss(groups.tensor, groups.context, tensor_parallel::TokenReduction::kNone)};
}

std::string builtin_types_reading(bool tokens) {
  return family_list([tokens](const FamilyRow& row) {
    return tokens ? row.body == Body::kGpt || row.body == Body::kDecoder : row.body == Body::kMlp;
  });
}

BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group,
                                const context_parallel::Group& context,
                                const expert_parallel::Group& experts) {
  const ModelGroups groups{group, context, experts};
  check_groups(config, groups);
  return config.type->build(config, groups);
}

}  // namespace pipetrain::models
