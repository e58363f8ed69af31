#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/models/family.h"
#include "pipetrain/models/gpt/gpt_config.h"
#include "pipetrain/models/llama/llama_config.h"
#include "pipetrain/models/mlp/mlp_config.h"
#include "pipetrain/models/moe/moe_config.h"

// The built-in models' config, without torch (what a command that only reads configs needs).
namespace pipetrain::models {

// The block counts a model may have (model.layers).
const config::Range& block_count_range();

// rope_type's spellings (model.rope_scaling.rope_type, and transformers' config.json).
const config::Names<RopeType>& rope_type_names();

// The `model` section of a config: {"type": a family's name, its sizes...}. The family's
// body says which part holds them; a Mixtral is a LLaMA decoder (its sizes in `llama`) whose
// MLPs are mixtures of experts (`moe`).
struct ModelConfig {
  const FamilyRow* type = family("gpt");
  // A program's family (Body::kProgram): its settings (model.params, kept whole for the
  // family's own build).
  nlohmann::json params = nlohmann::json::object();
  GptConfig gpt{};
  LlamaConfig llama{};
  MoeConfig moe{};
  MlpConfig mlp{};
  // A language model's special tokens as transformers' config.json names them (-1: none),
  // carried from `import --hf` to `export --format hf`.
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;  // the first where config.json lists several
  int64_t pad_token_id = -1;
  // Every end-of-sequence token where config.json lists several (LLaMA 3.1 Instruct's
  // three), written back as that list; empty: eos_token_id alone.
  std::vector<int64_t> eos_token_ids{};
};

// Whether model.type names a LLaMA-decoder family: its sizes are in `llama`.
inline bool llama_family(const ModelConfig& config) {
  return config.type->body == Body::kDecoder;
}

// Whether model.type routes tokens to experts: its MoE settings are in `moe`.
inline bool routes_experts(const ModelConfig& config) {
  return config.type->routes_experts;
}

// The sequence a language model trains on (its `context`); 0 for a model without tokens
// or a program's family.
int64_t context_of(const ModelConfig& config);

// A LLaMA-family model's decoder as its family builds it: `config.llama` with what the
// family fixes (Qwen2's q/k/v biases, Qwen3's q/k norms, Gemma 3's norms, scaled
// embeddings and GELU).
LlamaConfig decoder_config(const ModelConfig& config);

// What the model divides and routes (its family's row).
Capabilities capabilities(const ModelConfig& config);

// model.type as the config spells it.
inline const std::string& type_name(const ModelConfig& config) {
  return config.type->name;
}

// Whether the LM head uses the token embedding.
bool ties_embeddings(const ModelConfig& config);

// The `model` section's keys, each bound once; the sizes of each model hold when
// model.type names it.
const config::KeyTable<ModelConfig>& model_keys();

// Reads the `model` section of a config; unknown keys under it are returned in `unknown`
// for a warning.
ModelConfig parse_model_config(const nlohmann::json& config,
                               std::vector<std::string>* unknown = nullptr);

}  // namespace pipetrain::models
