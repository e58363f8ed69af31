#include "models/llama/llama_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Qwen2 and Qwen2.5 (transformers' Qwen2ForCausalLM): the decoder with q/k/v biases and
// Qwen's sliding windows.
namespace pipetrain::models {

const FamilyRow* qwen2_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "qwen2",
      .hf_architecture = "Qwen2ForCausalLM",
      .hf_model_type = "qwen2",
      .preset = [](const LlamaConfig&, LlamaConfig& decoder) { decoder.qkv_bias = true; },
      .from_hf =
          [](const HfFields& f, const nlohmann::json& hf, ModelConfig& config) {
            read_rope(f, config.llama);
            require_silu_without_capping(f);
            read_qwen_windows(f, hf, config.llama);
          },
      .to_hf = [](const ModelConfig&, const LlamaConfig& l,
                  nlohmann::json& hf) { write_qwen_windows(l, hf); },
  });
  return &row;
}

}  // namespace pipetrain::models
