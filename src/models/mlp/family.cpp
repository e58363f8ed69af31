#include <ATen/ATen.h>

#include "pipetrain/models/builtin_model.h"
#include "pipetrain/models/model_config.h"

// The MLP (a stack of linear layers over feature vectors) as a family row.
namespace pipetrain::models {
namespace {

void bind_mlp_keys(config::KeyTable<ModelConfig>& t) {
  t.integer("model.inputs", PIPETRAIN_FIELD(mlp.inputs), "input features")
      .integer("model.hidden", PIPETRAIN_FIELD(mlp.hidden), "hidden features")
      .integer("model.outputs", PIPETRAIN_FIELD(mlp.outputs), "outputs (or classes)")
      .integer("model.layers", PIPETRAIN_FIELD(mlp.layers), "linear layers", block_count_range())
      .choice("model.task", PIPETRAIN_FIELD(mlp.task),
              config::spellings({"regression", "classification"}),
              "the loss: MSE or cross-entropy");
}

BuiltinModel build_mlp(const ModelConfig& config, const ModelGroups&) {
  const MlpConfig m = config.mlp;
  return {mlp_layers(m), mlp_loss(m),
          [m](int64_t batch) {
            return module::Activation{at::randn({batch, m.inputs})};
          },
          FeatureInput{m.inputs, m.outputs}};
}

}  // namespace

const FamilyRow* mlp_family_row() {
  static const FamilyRow row{
      .name = "mlp", .body = Body::kMlp, .keys = bind_mlp_keys, .build = build_mlp};
  return &row;
}

}  // namespace pipetrain::models
