#include "pipetrain/models/builtin_model.h"

#include <ATen/ATen.h>

#include "pipetrain/errors.h"

namespace pipetrain::models {

ModelConfig parse_model_config(const ConfigSection& model, std::vector<std::string>* unknown) {
  ModelConfig config;
  config.type = model.get_string("type", config.type);
  std::vector<std::string> known{"type"};
  if (config.type == "gpt") {
    GptConfig& g = config.gpt;
    g.vocab_size = model.get_int("vocab_size", g.vocab_size);
    g.context = model.get_int("context", g.context);
    g.d_model = model.get_int("d_model", g.d_model);
    g.heads = model.get_int("heads", g.heads);
    g.layers = model.get_int("layers", g.layers);
    g.dropout = model.get_double("dropout", g.dropout);
    g.tie_embeddings = model.get_bool("tie_embeddings", g.tie_embeddings);
    known.insert(known.end(), {"vocab_size", "context", "d_model", "heads", "layers", "dropout",
                               "tie_embeddings"});
  } else if (config.type == "mlp") {
    MlpConfig& m = config.mlp;
    m.inputs = model.get_int("inputs", m.inputs);
    m.hidden = model.get_int("hidden", m.hidden);
    m.outputs = model.get_int("outputs", m.outputs);
    m.layers = model.get_int("layers", m.layers);
    m.task = model.get_string("task", m.task);
    known.insert(known.end(), {"inputs", "hidden", "outputs", "layers", "task"});
  } else {
    throw InputError(model.path() + ".type must be \"gpt\" or \"mlp\", got \"" + config.type +
                     "\"");
  }
  if (unknown) *unknown = model.unknown_keys(known);
  return config;
}

BuiltinModel make_builtin_model(const ModelConfig& config, const tensor_parallel::Group& group) {
  if (config.type == "gpt") {
    const GptConfig g = config.gpt;
    return {gpt_layers(g, group), gpt_loss(group), [g](int64_t batch) {
              return Activation{at::randint(g.vocab_size, {batch, g.context}, at::kLong)};
            }};
  }
  if (group.parallel()) {
    throw InputError("model_parallel " + std::to_string(group.size()) +
                     " needs a model with tensor-parallel layers (model.type \"gpt\"), not \"" +
                     config.type + "\"");
  }
  const MlpConfig m = config.mlp;
  return {mlp_layers(m), mlp_loss(m), [m](int64_t batch) {
            return Activation{at::randn({batch, m.inputs})};
          }};
}

}  // namespace pipetrain::models
