#include "pipetrain/models/model_config.h"

namespace pipetrain::models {

const config::KeyTable<ModelConfig>& model_keys() {
  static const config::KeyTable<ModelConfig> table = [] {
    config::KeyTable<ModelConfig> t;
    t.choice("model.type", PIPETRAIN_FIELD(type), config::spellings({"gpt", "mlp"}),
             "the built-in model");
    t.when([](const ModelConfig& c) { return c.type == "gpt"; }, "model.type gpt")
        .integer("model.vocab_size", PIPETRAIN_FIELD(gpt.vocab_size), "tokens")
        .integer("model.context", PIPETRAIN_FIELD(gpt.context), "longest sequence")
        .integer("model.d_model", PIPETRAIN_FIELD(gpt.d_model), "width, divisible by `heads`")
        .integer("model.heads", PIPETRAIN_FIELD(gpt.heads), "attention heads")
        .integer("model.layers", PIPETRAIN_FIELD(gpt.layers), "transformer blocks")
        .number("model.dropout", PIPETRAIN_FIELD(gpt.dropout), "dropout, in [0, 1)")
        .flag("model.tie_embeddings", PIPETRAIN_FIELD(gpt.tie_embeddings),
              "the LM head uses the token embedding");
    t.when([](const ModelConfig& c) { return c.type == "mlp"; }, "model.type mlp")
        .integer("model.inputs", PIPETRAIN_FIELD(mlp.inputs), "input features")
        .integer("model.hidden", PIPETRAIN_FIELD(mlp.hidden), "hidden features")
        .integer("model.outputs", PIPETRAIN_FIELD(mlp.outputs), "outputs (or classes)")
        .integer("model.layers", PIPETRAIN_FIELD(mlp.layers), "linear layers")
        .choice("model.task", PIPETRAIN_FIELD(mlp.task),
                config::spellings({"regression", "classification"}),
                "the loss: MSE or cross-entropy");
    return t;
  }();
  return table;
}

ModelConfig parse_model_config(const nlohmann::json& config, std::vector<std::string>* unknown) {
  ModelConfig model;
  std::vector<std::string> all_unknown = model_keys().read(config, model);
  if (unknown) {
    for (const auto& key : all_unknown) {
      if (key.rfind("model.", 0) == 0) unknown->push_back(key);
    }
  }
  return model;
}

}  // namespace pipetrain::models
