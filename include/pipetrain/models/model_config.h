#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/models/gpt_config.h"
#include "pipetrain/models/llama_config.h"
#include "pipetrain/models/mlp_config.h"
#include "pipetrain/models/moe_config.h"

// The built-in models' config, without torch (what a command that only reads configs needs).
namespace pipetrain::models {

// The `model` section of a config: {"type": "gpt" | "llama" | "mixtral" | "mlp", sizes...}.
// A Mixtral is a LLaMA (its sizes in `llama`) whose MLPs are mixtures of experts (`moe`).
struct ModelConfig {
  std::string type = "gpt";
  GptConfig gpt{};
  LlamaConfig llama{};
  MoeConfig moe{};
  MlpConfig mlp{};
  // A language model's special tokens as transformers' config.json names them (-1: none),
  // carried from `import --hf` to `export --format hf`.
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
};

// Whether model.type names a LLaMA-family decoder ("llama" or "mixtral").
inline bool llama_family(const ModelConfig& config) {
  return config.type == "llama" || config.type == "mixtral";
}

// The `model` section's keys, each bound once; the sizes of each model hold when
// model.type names it.
const config::KeyTable<ModelConfig>& model_keys();

// Reads the `model` section of a config; unknown keys under it are returned in `unknown`
// for a warning.
ModelConfig parse_model_config(const nlohmann::json& config,
                               std::vector<std::string>* unknown = nullptr);

}  // namespace pipetrain::models
