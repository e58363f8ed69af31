#include "models/llama/llama_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Mixtral (transformers' MixtralForCausalLM): Mistral's decoder whose MLPs are mixtures of
// experts in every block, as wide as the dense MLP, their chosen scores renormalised.
namespace pipetrain::models {
namespace {

// A Mixtral's MoE settings; the dense sizes are a LLaMA's.
MoeConfig mixtral_from_hf(const HfFields& f) {
  MoeConfig m;
  m.experts = f.integer("num_local_experts");
  m.experts_per_token = f.integer("num_experts_per_tok");
  m.router_aux_loss_coef = f.number("router_aux_loss_coef", 0.001);
  if (f.number("router_jitter_noise", 0.0) != 0)
    f.refuse("router_jitter_noise", "must be 0 (the router's inputs are not jittered)");
  return m;
}

// A Mixtral's experts in every block, as wide as the dense MLP, their scores renormalised.
void check_mixtral_only_format(const MoeConfig& m) {
  if (!m.norm_topk_prob || m.moe_intermediate_size > 0 || m.decoder_sparse_step != 1 ||
      !m.mlp_only_layers.empty())
    throw io::InputError(
        "model.norm_topk_prob, moe_intermediate_size, decoder_sparse_step and "
        "mlp_only_layers have no Mixtral format (export as \"qwen3_moe\")");
}

}  // namespace

const FamilyRow* mixtral_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "mixtral",
      .hf_architecture = "MixtralForCausalLM",
      .hf_model_type = "mixtral",
      .routes_experts = true,
      .expert_block = "block_sparse_moe",
      .expert_gate = "w1",
      .expert_down = "w2",
      .expert_up = "w3",
      .from_hf =
          [](const HfFields& f, const nlohmann::json&, ModelConfig& config) {
            read_rope(f, config.llama);
            require_silu_without_capping(f);
            read_mistral_windows(f, config.llama);
            config.moe = mixtral_from_hf(f);
          },
      .to_hf =
          [](const ModelConfig& config, const LlamaConfig& l, nlohmann::json& hf) {
            write_mistral_windows("mixtral", l, hf);
            hf["num_local_experts"] = config.moe.experts;
            hf["num_experts_per_tok"] = config.moe.experts_per_token;
            hf["router_aux_loss_coef"] = config.moe.router_aux_loss_coef;
            hf["router_jitter_noise"] = 0.0;
            hf["output_router_logits"] = false;
          },
      .check_format =
          [](const ModelConfig& config) {
            check_transformers_router(config.moe);
            check_mixtral_only_format(config.moe);
          },
  });
  return &row;
}

}  // namespace pipetrain::models
