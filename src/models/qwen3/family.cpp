#include "models/llama/llama_hf.h"
#include "models/qwen3/qwen3_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Qwen3 (transformers' Qwen3ForCausalLM): the decoder with an RMSNorm over each query and key
// head, no biases, Qwen's sliding windows.
namespace pipetrain::models {

void read_qwen3_fields(const HfFields& f, const nlohmann::json& hf, LlamaConfig& l) {
  read_rope(f, l);
  require_silu_without_capping(f);
  if (f.flag("attention_bias", false))
    f.refuse("attention_bias", "is not supported (Qwen3's projections have none)");
  read_qwen_windows(f, hf, l);
}

void write_qwen3_fields(const LlamaConfig& l, nlohmann::json& hf) {
  hf["attention_bias"] = false;
  hf["mlp_bias"] = false;
  write_qwen_windows(l, hf);
}

const FamilyRow* qwen3_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "qwen3",
      .hf_architecture = "Qwen3ForCausalLM",
      .hf_model_type = "qwen3",
      .preset = [](const LlamaConfig&, LlamaConfig& decoder) { decoder.qk_norm = true; },
      .from_hf = [](const HfFields& f, const nlohmann::json& hf,
                    ModelConfig& config) { read_qwen3_fields(f, hf, config.llama); },
      .to_hf = [](const ModelConfig&, const LlamaConfig& l,
                  nlohmann::json& hf) { write_qwen3_fields(l, hf); },
  });
  return &row;
}

}  // namespace pipetrain::models
