#include "pipetrain/models/builtin_model.h"

#include <ATen/ATen.h>

#include "pipetrain/io/errors.h"

namespace pipetrain::models {

std::string builtin_types_reading(bool tokens) {
  return tokens ? "\"gpt\"" : "\"mlp\"";
}

BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group) {
  if (config.type == "gpt") {
    const GptConfig g = config.gpt;
    return {gpt_layers(g, group), gpt_loss(group),
            [g](int64_t batch) {
              return module::Activation{at::randint(g.vocab_size, {batch, g.context}, at::kLong)};
            },
            TokenInput{g.vocab_size, g.context}};
  }
  if (group.parallel()) {
    throw io::InputError("model_parallel " + std::to_string(group.size()) +
                         " needs a model with tensor-parallel layers (model.type \"gpt\"), not \"" +
                         config.type + "\"");
  }
  const MlpConfig m = config.mlp;
  return {mlp_layers(m), mlp_loss(m),
          [m](int64_t batch) {
            return module::Activation{at::randn({batch, m.inputs})};
          },
          FeatureInput{m.inputs, m.outputs}};
}

}  // namespace pipetrain::models
