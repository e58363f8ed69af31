#include "pipetrain/models/builtin_model.h"

#include <ATen/ATen.h>

#include "pipetrain/io/errors.h"
#include "pipetrain/models/llama.h"

namespace pipetrain::models {
namespace {

// A language model over `vocab_size` tokens in windows of `context`.
BuiltinModel language_model(std::vector<module::LayerSpec> layers,
                            const tensor_parallel::Group& group,
                            const context_parallel::Group& context_group, int64_t vocab_size,
                            int64_t context) {
  return {std::move(layers), gpt_loss(group, context_group),
          [vocab_size, context](int64_t batch) {
            return module::Activation{at::randint(vocab_size, {batch, context}, at::kLong)};
          },
          TokenInput{vocab_size, context}};
}

}  // namespace

std::string builtin_types_reading(bool tokens) {
  return tokens ? "\"gpt\", \"llama\" or \"mixtral\"" : "\"mlp\"";
}

BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group,
                                const context_parallel::Group& context,
                                const expert_parallel::Group& experts) {
  if (experts.parallel() && config.type != Family::kMixtral) {
    throw io::InputError("expert_parallel " + std::to_string(experts.size()) +
                         " splits experts: it needs model.type \"mixtral\", not \"" + name_of(config.type) +
                         "\"");
  }
  if (config.type == Family::kGpt) {
    const GptConfig& g = config.gpt;
    return language_model(gpt_layers(g, group, context), group, context, g.vocab_size, g.context);
  }
  if (llama_family(config)) {
    const LlamaConfig& l = config.llama;
    std::optional<MoeConfig> moe;
    if (config.type == Family::kMixtral) moe = config.moe;
    return language_model(llama_layers(l, group, context, moe, experts), group, context,
                          l.vocab_size, l.context);
  }
  if (context.parallel()) {
    throw io::InputError("context_parallel " + std::to_string(context.size()) +
                         " splits sequences for attention: it needs model.type \"gpt\" or "
                         "\"llama\", not \"" +
                         name_of(config.type) + "\"");
  }
  if (group.parallel()) {
    throw io::InputError("model_parallel " + std::to_string(group.size()) +
                         " needs a model with tensor-parallel layers (model.type \"gpt\" or "
                         "\"llama\"), not \"" +
                         name_of(config.type) + "\"");
  }
  const MlpConfig m = config.mlp;
  return {mlp_layers(m), mlp_loss(m),
          [m](int64_t batch) {
            return module::Activation{at::randn({batch, m.inputs})};
          },
          FeatureInput{m.inputs, m.outputs}};
}

}  // namespace pipetrain::models
