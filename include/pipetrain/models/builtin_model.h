#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/config/config_section.h"
#include "pipetrain/models/gpt.h"
#include "pipetrain/models/mlp.h"

namespace pipetrain::models {

// The `model` section of a config: {"type": "gpt" | "mlp", sizes...}.
struct ModelConfig {
  std::string type = "gpt";
  GptConfig gpt;
  MlpConfig mlp;
};

// Reads and checks the section; unknown keys are returned in `unknown` for a warning.
ModelConfig parse_model_config(const ConfigSection& model,
                               std::vector<std::string>* unknown = nullptr);

struct BuiltinModel {
  std::vector<LayerSpec> layers;
  LossFunction loss;
  // A random micro-batch's inputs of `batch` samples (for profiling).
  std::function<Activation(int64_t batch)> sample_input;
};

// With a tensor-parallel group of more than one rank: its shard of the model (GPT only).
BuiltinModel make_builtin_model(const ModelConfig& config,
                                const tensor_parallel::Group& group = {});

}  // namespace pipetrain::models
