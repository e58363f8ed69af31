#include "models/llama/llama_hf.h"
#include "models/qwen3/qwen3_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Qwen3-MoE (transformers' Qwen3MoeForCausalLM): Qwen3's decoder whose blocks route to
// experts of their own width (decoder_sparse_step and mlp_only_layers choose which).
namespace pipetrain::models {
namespace {

// Qwen3-MoE's settings: its experts, router and which blocks route; the dense sizes are a
// LLaMA's (its q/k norms Qwen3's).
MoeConfig qwen3_moe_from_hf(const HfFields& f, const nlohmann::json& hf) {
  MoeConfig m;
  // transformers 5 writes num_experts as num_local_experts (its attribute map).
  m.experts =
      f.present("num_local_experts") ? f.integer("num_local_experts") : f.integer("num_experts");
  m.experts_per_token = f.integer("num_experts_per_tok");
  m.norm_topk_prob = f.flag("norm_topk_prob", false);
  m.moe_intermediate_size = f.integer("moe_intermediate_size");
  m.decoder_sparse_step = f.integer("decoder_sparse_step", 1);
  if (m.decoder_sparse_step < 1) f.refuse("decoder_sparse_step", "must be at least 1");
  m.router_aux_loss_coef = f.number("router_aux_loss_coef", 0.001);
  if (f.present("mlp_only_layers")) {
    const nlohmann::json& layers = hf["mlp_only_layers"];
    if (!layers.is_array()) f.refuse("mlp_only_layers", "must be a list of block numbers");
    for (const auto& layer : layers) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0)
        f.refuse("mlp_only_layers", "must be a list of block numbers");
      m.mlp_only_layers.push_back(layer.get<int64_t>());
    }
  }
  return m;
}

}  // namespace

const FamilyRow* qwen3_moe_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "qwen3_moe",
      .hf_architecture = "Qwen3MoeForCausalLM",
      .hf_model_type = "qwen3_moe",
      .preset = [](const LlamaConfig&, LlamaConfig& decoder) { decoder.qk_norm = true; },
      .routes_experts = true,
      .expert_block = "mlp",
      .expert_gate = "gate_proj",
      .expert_down = "down_proj",
      .expert_up = "up_proj",
      .from_hf =
          [](const HfFields& f, const nlohmann::json& hf, ModelConfig& config) {
            read_qwen3_fields(f, hf, config.llama);
            config.moe = qwen3_moe_from_hf(f, hf);
          },
      .to_hf =
          [](const ModelConfig& config, const LlamaConfig& l, nlohmann::json& hf) {
            write_qwen3_fields(l, hf);
            const MoeConfig& m = config.moe;
            hf["num_experts"] = m.experts;
            hf["num_experts_per_tok"] = m.experts_per_token;
            hf["norm_topk_prob"] = m.norm_topk_prob;
            hf["moe_intermediate_size"] =
                m.moe_intermediate_size > 0 ? m.moe_intermediate_size : l.intermediate_size;
            hf["decoder_sparse_step"] = m.decoder_sparse_step;
            hf["mlp_only_layers"] = m.mlp_only_layers;
            hf["router_aux_loss_coef"] = m.router_aux_loss_coef;
            hf["output_router_logits"] = false;
          },
      .check_format = [](const ModelConfig& config) { check_transformers_router(config.moe); },
  });
  return &row;
}

}  // namespace pipetrain::models
