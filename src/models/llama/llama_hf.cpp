#include "models/llama/llama_hf.h"

#include <algorithm>

#include "pipetrain/io/errors.h"
#include "pipetrain/models/model_config.h"

namespace pipetrain::models {

LlamaConfig decoder_sizes_from_hf(const HfFields& f) {
  LlamaConfig l;
  l.vocab_size = f.integer("vocab_size");
  l.context = f.integer("max_position_embeddings");
  l.max_position_embeddings = l.context;
  l.d_model = f.integer("hidden_size");
  l.heads = f.integer("num_attention_heads");
  l.num_key_value_heads = f.integer("num_key_value_heads", l.heads);
  l.intermediate_size = f.integer("intermediate_size");
  l.layers = f.integer("num_hidden_layers");
  l.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  l.tie_embeddings = f.flag("tie_word_embeddings", false);
  if (f.flag("mlp_bias", false)) f.refuse("mlp_bias", "is not supported (no biases)");
  if (f.present("head_dim")) {
    const int64_t head_dim = f.integer("head_dim");
    if (head_dim < 1) f.refuse("head_dim", "must be at least 1");
    if (head_dim * l.heads != l.d_model) l.head_dim = head_dim;
  }
  return l;
}

void read_rope(const HfFields& f, LlamaConfig& l) {
  l.rope_theta = f.number("rope_theta", 10000.0);
  if (f.present("partial_rotary_factor") && f.number("partial_rotary_factor", 1.0) != 1.0)
    f.refuse("partial_rotary_factor", "must be 1 (every dimension of a head rotates)");
  const char* section = f.present("rope_parameters") ? "rope_parameters"
                        : f.present("rope_scaling")  ? "rope_scaling"
                                                     : nullptr;
  if (!section) return;
  read_rope_section(HfFields(f.get(section), f.source() + ": " + section), l);
}

void read_rope_section(const HfFields& rope, LlamaConfig& l) {
  l.rope_theta = rope.number("rope_theta", l.rope_theta);
  const std::string type = rope.text("rope_type", rope.text("type", "default"));
  bool known = false;
  for (const auto& [name, value] : rope_type_names()) {
    if (name == type) {
      l.rope_scaling.type = value;
      known = true;
    }
  }
  if (!known)
    rope.refuse("rope_type", "\"" + type +
                                 "\" is not one pipetrain computes (default, linear, dynamic, "
                                 "llama3, yarn)");
  if (rope.present("partial_rotary_factor") && rope.number("partial_rotary_factor", 1.0) != 1.0)
    rope.refuse("partial_rotary_factor", "must be 1 (every dimension of a head rotates)");
  RopeScaling& r = l.rope_scaling;
  if (r.type == RopeType::kDefault) return;
  r.original_max_position_embeddings = rope.integer("original_max_position_embeddings", 0);
  if (r.type == RopeType::kYarn && !rope.present("factor") &&
      r.original_max_position_embeddings > 0)
    r.factor = static_cast<double>(l.positions()) / r.original_max_position_embeddings;
  else
    r.factor = rope.number("factor", 1.0);
  if (r.type == RopeType::kLlama3) {
    r.low_freq_factor = rope.number("low_freq_factor", r.low_freq_factor);
    r.high_freq_factor = rope.number("high_freq_factor", r.high_freq_factor);
  }
  if (r.type == RopeType::kYarn) {
    r.beta_fast = rope.number("beta_fast", r.beta_fast);
    r.beta_slow = rope.number("beta_slow", r.beta_slow);
    r.attention_factor = rope.number("attention_factor", 0.0);
    r.truncate = rope.flag("truncate", true);
    for (const char* key : {"mscale", "mscale_all_dim"}) {
      if (rope.present(key)) rope.refuse(key, "is not supported (DeepSeek's YaRN scaling)");
    }
  }
}

void require_silu_without_capping(const HfFields& f) {
  if (f.text("hidden_act", "silu") != "silu")
    f.refuse("hidden_act", "must be \"silu\" (the SwiGLU MLP)");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (f.present(key)) f.refuse(key, "is not supported (no soft-capping)");
  }
}

// Qwen's windows: layer_types ("full_attention" / "sliding_attention"), or
// use_sliding_window with the blocks from max_window_layers on sliding.
void read_qwen_windows(const HfFields& f, const nlohmann::json& hf, LlamaConfig& l) {
  if (!f.present("layer_types")) {
    if (!f.flag("use_sliding_window", false)) return;
    l.sliding_window = f.integer("sliding_window");
    l.max_window_layers = std::min(f.integer("max_window_layers", 0), l.layers);
    return;
  }
  const nlohmann::json& types = hf["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != l.layers)
    f.refuse("layer_types", "must list num_hidden_layers layer types");
  int64_t first_sliding = l.layers;
  for (int64_t i = 0; i < l.layers; ++i) {
    const nlohmann::json& type = types[static_cast<size_t>(i)];
    const bool sliding = type == "sliding_attention";
    if (!sliding && type != "full_attention")
      f.refuse("layer_types", "lists " + type.dump() +
                                  ": each must be \"full_attention\" or \"sliding_attention\"");
    if (sliding && first_sliding == l.layers) first_sliding = i;
    if (!sliding && first_sliding < l.layers)
      f.refuse("layer_types",
               "must list the full-attention blocks first, then the sliding ones "
               "(Qwen's max_window_layers rule)");
  }
  if (first_sliding == l.layers) return;
  l.sliding_window = f.integer("sliding_window");
  l.max_window_layers = first_sliding;
}

void read_mistral_windows(const HfFields& f, LlamaConfig& l) {
  l.sliding_window = f.present("sliding_window") ? f.integer("sliding_window") : 0;
  if (f.flag("attention_bias", false)) f.refuse("attention_bias", "is not supported");
}

nlohmann::json rope_parameters_of(const LlamaConfig& l) {
  const RopeScaling& r = l.rope_scaling;
  nlohmann::json rope = {{"rope_type", config::name_of(rope_type_names(), r.type)},
                         {"rope_theta", l.rope_theta}};
  if (r.type == RopeType::kDefault) return rope;
  rope["factor"] = r.factor;
  if (r.original_max_position_embeddings > 0)
    rope["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.type == RopeType::kLlama3) {
    rope["low_freq_factor"] = r.low_freq_factor;
    rope["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.type == RopeType::kYarn) {
    rope["beta_fast"] = r.beta_fast;
    rope["beta_slow"] = r.beta_slow;
    rope["truncate"] = r.truncate;
    if (r.attention_factor > 0) rope["attention_factor"] = r.attention_factor;
  }
  return rope;
}

nlohmann::json decoder_hf_config(const LlamaConfig& l) {
  return {{"vocab_size", l.vocab_size},
          {"max_position_embeddings", l.positions()},
          {"hidden_size", l.d_model},
          {"num_attention_heads", l.heads},
          {"num_key_value_heads", l.num_key_value_heads},
          {"head_dim", l.head_width()},
          {"intermediate_size", l.intermediate_size},
          {"num_hidden_layers", l.layers},
          {"rope_theta", l.rope_theta},  // transformers 4; 5 reads rope_parameters
          {"rope_parameters", rope_parameters_of(l)},
          {"rms_norm_eps", l.rms_norm_eps},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", l.tie_embeddings},
          {"torch_dtype", "float32"}};
}

bool has_windows(const LlamaConfig& l) {
  return l.sliding_window > 0 && l.max_window_layers < l.layers;
}

void write_qwen_windows(const LlamaConfig& l, nlohmann::json& hf) {
  const bool windows = has_windows(l);
  hf["use_sliding_window"] = windows;
  hf["sliding_window"] = windows ? nlohmann::json(l.sliding_window) : nlohmann::json(nullptr);
  hf["max_window_layers"] = windows ? l.max_window_layers : l.layers;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < l.layers; ++i)
    types.push_back(windows && l.slides(i) ? "sliding_attention" : "full_attention");
  hf["layer_types"] = types;
}

void write_mistral_windows(const std::string& family, const LlamaConfig& l, nlohmann::json& hf) {
  const bool windows = has_windows(l);
  if (windows && l.max_window_layers > 0)
    throw io::InputError("model.max_window_layers has no transformers format for model.type \"" +
                         family + "\" (its windows are in every block)");
  hf["sliding_window"] = windows ? nlohmann::json(l.sliding_window) : nlohmann::json(nullptr);
}

void refuse_windows(const std::string& family, const LlamaConfig& l) {
  if (has_windows(l))
    throw io::InputError("model.sliding_window has no transformers format for model.type \"" +
                         family + "\" (export as \"mistral\" or \"qwen2\")");
}

namespace {

// The experts of a routing block: the router `<block>.gate`, and expert j's gate, down and up
// projections under `<block>.experts.j` by the family's names.
void add_experts(std::vector<HfTensor>& t, const MoeConfig& m, int i, const ExpertNames& names) {
  const std::string moe = "model.layers." + std::to_string(i) + "." + names.block + ".";
  add_tensor(t, moe + "gate.weight", i + 1, "moe.router");
  const std::pair<const std::string*, const char*> weights[] = {
      {&names.gate, "moe.gate_proj"}, {&names.down, "moe.down_proj"}, {&names.up, "moe.up_proj"}};
  for (const auto& [hf, ours] : weights) {
    for (int64_t e = 0; e < m.experts; ++e) {
      t.push_back({moe + "experts." + std::to_string(e) + "." + *hf + ".weight",
                   "layers." + std::to_string(i + 1) + "." + ours, false, e});
    }
  }
}

}  // namespace

std::vector<HfTensor> decoder_tensors(const LlamaConfig& l, const MoeConfig* moe,
                                      const ExpertNames& experts) {
  std::vector<HfTensor> t;
  const std::pair<const char*, const char*> biases[] = {{"self_attn.q_proj", "q_proj"},
                                                        {"self_attn.k_proj", "k_proj"},
                                                        {"self_attn.v_proj", "v_proj"}};
  const std::pair<const char*, const char*> head_norms[] = {{"self_attn.q_norm", "q_norm"},
                                                            {"self_attn.k_norm", "k_norm"}};
  add_tensor(t, "model.embed_tokens.weight", 0, "tokens.weight");
  const std::pair<const char*, const char*> weights[] = {
      {"input_layernorm", "attention_norm"}, {"self_attn.q_proj", "q_proj"},
      {"self_attn.k_proj", "k_proj"},        {"self_attn.v_proj", "v_proj"},
      {"self_attn.o_proj", "o_proj"},        {"post_attention_layernorm", "mlp_norm"},
      {"mlp.gate_proj", "gate_proj"},        {"mlp.up_proj", "up_proj"},
      {"mlp.down_proj", "down_proj"}};
  // Gemma's four norms per block: before and after attention and the MLP.
  const std::pair<const char*, const char*> sandwich[] = {
      {"input_layernorm", "attention_norm"},
      {"post_attention_layernorm", "attention_out_norm"},
      {"pre_feedforward_layernorm", "mlp_norm"},
      {"post_feedforward_layernorm", "mlp_out_norm"}};
  for (int i = 0; i < l.layers; ++i) {
    const bool routed = moe && moe->routes(i);
    for (const auto& [hf, ours] : sandwich) {
      if (l.sandwich_norms)
        add_tensor(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
                   std::string(ours) + ".weight");
    }
    for (const auto& [hf, ours] : weights) {
      if (l.sandwich_norms && std::string(ours).find("_norm") != std::string::npos) continue;
      if (routed && std::string(hf).rfind("mlp.", 0) == 0) continue;
      add_tensor(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
                 std::string(ours) + ".weight");
    }
    for (const auto& [hf, ours] : biases) {
      if (l.qkv_bias)
        add_tensor(t, "model.layers." + std::to_string(i) + "." + hf + ".bias", i + 1,
                   std::string(ours) + ".bias");
    }
    for (const auto& [hf, ours] : head_norms) {
      if (l.qk_norm)
        add_tensor(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
                   std::string(ours) + ".weight");
    }
    if (routed) add_experts(t, *moe, i, experts);
  }
  const int final_norm = static_cast<int>(l.layers) + 1;
  add_tensor(t, "model.norm.weight", final_norm, "weight");
  if (!l.tie_embeddings) add_tensor(t, "lm_head.weight", final_norm + 1, "weight");
  return t;
}

void check_transformers_router(const MoeConfig& m) {
  if (m.score != RouterScore::kSoftmax)
    throw io::InputError(
        "model.router_score \"sigmoid\" has no transformers format (Mixtral's "
        "router is a softmax)");
  if (m.shared_experts > 0)
    throw io::InputError("model.shared_experts has no transformers format (Mixtral has none)");
}

}  // namespace pipetrain::models
