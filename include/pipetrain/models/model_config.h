#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/models/gpt/gpt_config.h"
#include "pipetrain/models/llama/llama_config.h"
#include "pipetrain/models/mlp/mlp_config.h"
#include "pipetrain/models/moe/moe_config.h"

// The built-in models' config, without torch (what a command that only reads configs needs).
namespace pipetrain::models {

// The model families (model.type): the built-in ones, and kRegistered for one a program
// registers (models::register_family, builtin_model.h) under a name of its own. Their
// names are parsed here and nowhere else.
enum class Family {
  kGpt,
  kLlama,
  kMixtral,
  kQwen2,
  kQwen3,
  kMistral,
  kQwen3Moe,
  kGemma3,
  kMlp,
  kRegistered
};

// model.type's spellings of the built-in families, and a built-in family's.
const config::Names<Family>& family_names();
const std::string& name_of(Family family);

// rope_type's spellings (model.rope_scaling.rope_type, and transformers' config.json).
const config::Names<RopeType>& rope_type_names();

// The `model` section of a config: {"type": "gpt" | "llama" | "mixtral" | "qwen2" | "qwen3" |
// "mistral" | "mlp", sizes...}.
// A Mixtral is a LLaMA (its sizes in `llama`) whose MLPs are mixtures of experts (`moe`).
struct ModelConfig {
  Family type = Family::kGpt;
  // With kRegistered: the family's name (model.type) and its settings (model.params, kept
  // whole for the family's own reader).
  std::string registered;
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
  std::vector<int64_t> eos_token_ids;
};

// Whether model.type names a LLaMA-family decoder ("llama", "mixtral", "qwen2", "qwen3",
// "mistral", "qwen3_moe" or "gemma3").
inline bool llama_family(const ModelConfig& config) {
  switch (config.type) {
    case Family::kLlama:
    case Family::kMixtral:
    case Family::kQwen2:
    case Family::kQwen3:
    case Family::kMistral:
    case Family::kQwen3Moe:
    case Family::kGemma3:
      return true;
    default:
      return false;
  }
}

// Whether model.type routes tokens to experts ("mixtral", "qwen3_moe"): its MoE settings
// are in `moe`.
inline bool routes_experts(const ModelConfig& config) {
  return config.type == Family::kMixtral || config.type == Family::kQwen3Moe;
}

// A LLaMA-family model's decoder as its family builds it: `config.llama` with what the
// family fixes (Qwen2's q/k/v biases, Qwen3's q/k norms, Gemma 3's norms, scaled
// embeddings and GELU).
LlamaConfig decoder_config(const ModelConfig& config);

// What a model can do: what code outside models/ asks instead of comparing names.
struct Capabilities {
  bool tensor_parallel = false;   // heads, MLPs and vocabulary split over model_parallel
  bool context_parallel = false;  // sequences split over context_parallel (ring attention)
  // Megatron's sequence parallelism over model_parallel (besides tensor parallelism).
  bool sequence_parallel = false;
  int64_t routed_experts = 0;  // experts of each MoE layer, split over expert_parallel; 0: dense
};
Capabilities capabilities(const ModelConfig& config);

// model.type as the config spells it: a built-in family's name, or a registered one's.
const std::string& type_name(const ModelConfig& config);

// The torch-free half of registering a family (register_family does both halves): its
// name, which model.type then accepts, and what it can do. logic_error for a name taken.
void register_family_name(const std::string& name, const Capabilities& capabilities);

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
