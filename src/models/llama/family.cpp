#include "models/llama/llama_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// LLaMA (2, 3, 3.1's rotation; transformers' LlamaForCausalLM): the decoder as it is.
namespace pipetrain::models {

const FamilyRow* llama_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "llama",
      .hf_architecture = "LlamaForCausalLM",
      .hf_model_type = "llama",
      .from_hf =
          [](const HfFields& f, const nlohmann::json&, ModelConfig& config) {
            read_rope(f, config.llama);
            require_silu_without_capping(f);
            if (f.flag("attention_bias", false))
              f.refuse("attention_bias", "is not supported (no biases)");
          },
      .to_hf =
          [](const ModelConfig&, const LlamaConfig& l, nlohmann::json& hf) {
            hf["attention_bias"] = false;
            hf["mlp_bias"] = false;
            refuse_windows("llama", l);
          },
  });
  return &row;
}

}  // namespace pipetrain::models
