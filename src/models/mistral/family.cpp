#include "models/llama/llama_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Mistral (transformers' MistralForCausalLM): the decoder with a sliding window in every
// block.
namespace pipetrain::models {

const FamilyRow* mistral_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "mistral",
      .hf_architecture = "MistralForCausalLM",
      .hf_model_type = "mistral",
      .from_hf =
          [](const HfFields& f, const nlohmann::json&, ModelConfig& config) {
            read_rope(f, config.llama);
            require_silu_without_capping(f);
            read_mistral_windows(f, config.llama);
          },
      .to_hf = [](const ModelConfig&, const LlamaConfig& l,
                  nlohmann::json& hf) { write_mistral_windows("mistral", l, hf); },
  });
  return &row;
}

}  // namespace pipetrain::models
