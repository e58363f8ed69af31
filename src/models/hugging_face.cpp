#include "models/hugging_face.h"

#include <cmath>

#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

constexpr double kLayerNormEps = 1e-5;  // the GPT's LayerNorms (torch's default)

// A config.json field, checked for its type; `fallback` when it is absent or null.
class HfFields {
 public:
  HfFields(const nlohmann::json& hf, std::string source) : hf_(hf), source_(std::move(source)) {
    if (!hf_.is_object()) throw io::InputError(source_ + ": not a JSON object");
  }

  int64_t integer(const std::string& key) const {
    const nlohmann::json& v = required(key);
    if (!v.is_number_integer()) refuse(key, "must be an integer");
    return v.get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return present(key) ? integer(key) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_number()) refuse(key, "must be a number");
    return hf_[key].get<double>();
  }
  bool flag(const std::string& key, bool fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_boolean()) refuse(key, "must be true or false");
    return hf_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& fallback) const {
    if (!present(key)) return fallback;
    if (!hf_[key].is_string()) refuse(key, "must be a string");
    return hf_[key].get<std::string>();
  }
  bool present(const std::string& key) const { return hf_.contains(key) && !hf_[key].is_null(); }
  const nlohmann::json& get(const std::string& key) const {
    if (!hf_[key].is_object()) refuse(key, "must be an object");
    return hf_[key];
  }
  const std::string& source() const { return source_; }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw io::InputError(source_ + ": " + key + " " + why);
  }

 private:
  const nlohmann::json& required(const std::string& key) const {
    if (!present(key)) refuse(key, "is missing");
    return hf_[key];
  }
  const nlohmann::json& hf_;
  std::string source_;
};

// The transformers classes pipetrain imports and exports, and their model_type.
struct Architecture {
  const char* name;
  const char* model_type;
  Family family;
};
constexpr Architecture kArchitectures[] = {
    {"GPT2LMHeadModel", "gpt2", Family::kGpt},
    {"LlamaForCausalLM", "llama", Family::kLlama},
    {"MixtralForCausalLM", "mixtral", Family::kMixtral},
    {"Qwen2ForCausalLM", "qwen2", Family::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", Family::kQwen3},
    {"MistralForCausalLM", "mistral", Family::kMistral},
    {"Qwen3MoeForCausalLM", "qwen3_moe", Family::kQwen3Moe},
    {"Gemma3ForCausalLM", "gemma3_text", Family::kGemma3},
};

std::string architecture_list() {
  std::string list;
  for (const Architecture& a : kArchitectures)
    list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

const Architecture* architecture_of_family(Family family) {
  for (const Architecture& a : kArchitectures) {
    if (a.family == family) return &a;
  }
  return nullptr;
}

const Architecture& architecture_of(const nlohmann::json& hf, const HfFields& fields) {
  if (hf.contains("architectures") && hf["architectures"].is_array() &&
      !hf["architectures"].empty() && hf["architectures"][0].is_string()) {
    const std::string name = hf["architectures"][0].get<std::string>();
    for (const Architecture& a : kArchitectures) {
      if (name == a.name) return a;
    }
    fields.refuse("architectures",
                  "\"" + name + "\" is not one pipetrain imports (" + architecture_list() + ")");
  }
  const std::string type = fields.text("model_type", "");
  for (const Architecture& a : kArchitectures) {
    if (type == a.model_type) return a;
  }
  fields.refuse("architectures",
                "is missing (and model_type \"" + type + "\" is not one pipetrain imports)");
}

GptConfig gpt2_from_hf(const HfFields& f) {
  GptConfig g;
  g.vocab_size = f.integer("vocab_size");
  g.context = f.integer("n_positions");
  g.d_model = f.integer("n_embd");
  g.heads = f.integer("n_head");
  g.layers = f.integer("n_layer");
  g.dropout = f.number("resid_pdrop", 0.1);
  g.tie_embeddings = f.flag("tie_word_embeddings", true);
  const std::string activation = f.text("activation_function", "gelu_new");
  if (activation == "gelu_new" || activation == "gelu_pytorch_tanh") {
    g.gelu = Gelu::kTanh;
  } else if (activation == "gelu") {
    g.gelu = Gelu::kExact;
  } else {
    f.refuse("activation_function", "\"" + activation +
                                        "\" is not one pipetrain computes (gelu, "
                                        "gelu_new, gelu_pytorch_tanh)");
  }
  if (f.integer("n_inner", 4 * g.d_model) != 4 * g.d_model)
    f.refuse("n_inner", "must be 4 * n_embd (the GPT's MLP width)");
  if (f.number("layer_norm_epsilon", kLayerNormEps) != kLayerNormEps)
    f.refuse("layer_norm_epsilon", "must be 1e-05 (the GPT's LayerNorm)");
  if (!f.flag("scale_attn_weights", true))
    f.refuse("scale_attn_weights", "must be true (attention is scaled by 1/sqrt(head size))");
  if (f.flag("scale_attn_by_inverse_layer_idx", false))
    f.refuse("scale_attn_by_inverse_layer_idx", "is not supported");
  return g;
}

// transformers 4 writes rope_theta and rope_scaling {type or rope_type, factor, ...}, 5
// writes rope_parameters {rope_type, rope_theta, factor, ...}.
void read_rope_section(const HfFields& rope, LlamaConfig& l);

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

// Gemma 3's rotations: rope_parameters per layer type (transformers 5), or rope_theta,
// rope_scaling and rope_local_base_freq (4). The sliding blocks' is a plain one.
void read_gemma_rope(const HfFields& f, LlamaConfig& l) {
  l.rope_theta = f.number("rope_theta", 1000000.0);
  l.rope_local_base_freq = f.number("rope_local_base_freq", 10000.0);
  if (!f.present("rope_parameters")) {
    if (f.present("rope_scaling"))
      read_rope_section(HfFields(f.get("rope_scaling"), f.source() + ": rope_scaling"), l);
    return;
  }
  const HfFields by_type(f.get("rope_parameters"), f.source() + ": rope_parameters");
  if (by_type.present("full_attention")) {
    read_rope_section(
        HfFields(by_type.get("full_attention"), by_type.source() + ": full_attention"), l);
  }
  if (by_type.present("sliding_attention")) {
    const HfFields local(by_type.get("sliding_attention"),
                         by_type.source() + ": sliding_attention");
    if (local.text("rope_type", "default") != "default")
      local.refuse("rope_type", "must be \"default\" (the sliding blocks' rotation is plain)");
    l.rope_local_base_freq = local.number("rope_theta", l.rope_local_base_freq);
  }
}

// One rope section: {rope_type or type, rope_theta, factor, ...}.
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

// Gemma 3's fields: its activation, windows by layer type, attention scale and capping.
void read_gemma(const HfFields& f, const nlohmann::json& hf, LlamaConfig& l) {
  if (f.text("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
    f.refuse("hidden_activation", "must be \"gelu_pytorch_tanh\" (Gemma's gated MLP)");
  if (f.present("hidden_act") && f.text("hidden_act", "") != "gelu_pytorch_tanh")
    f.refuse("hidden_act", "must be \"gelu_pytorch_tanh\" (Gemma's gated MLP)");
  if (f.flag("use_bidirectional_attention", false))
    f.refuse("use_bidirectional_attention", "is not supported (causal attention only)");
  if (f.flag("attention_bias", false)) f.refuse("attention_bias", "is not supported");
  if (f.present("attn_logit_softcapping"))
    f.refuse("attn_logit_softcapping", "is not supported (Gemma 2's; Gemma 3 has none)");
  l.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  l.tie_embeddings = f.flag("tie_word_embeddings", true);
  l.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256.0);
  if (!(l.query_pre_attn_scalar > 0)) f.refuse("query_pre_attn_scalar", "must be positive");
  l.final_logit_softcapping = f.number("final_logit_softcapping", 0.0);
  if (l.final_logit_softcapping < 0)
    f.refuse("final_logit_softcapping", "must be positive (or null: none)");
  l.sliding_window = f.present("sliding_window") ? f.integer("sliding_window") : 0;
  // The sliding blocks: layer_types, which must follow one pattern (block i full where
  // (i + 1) % pattern == 0), or sliding_window_pattern (transformers 4).
  l.sliding_window_pattern = f.integer("sliding_window_pattern", 6);
  if (!f.present("layer_types")) return;
  const nlohmann::json& types = hf["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != l.layers)
    f.refuse("layer_types", "must list num_hidden_layers layer types");
  for (int64_t pattern = 1; pattern <= l.layers + 1; ++pattern) {
    bool fits = true;
    for (int64_t i = 0; i < l.layers && fits; ++i) {
      const bool sliding = (i + 1) % pattern != 0;
      fits = types[static_cast<size_t>(i)] == (sliding ? "sliding_attention" : "full_attention");
    }
    if (fits) {
      l.sliding_window_pattern = pattern;
      return;
    }
  }
  f.refuse("layer_types",
           "must follow one pattern: block i full_attention where (i + 1) % N == 0, the rest "
           "sliding_attention (Gemma 3's sliding_window_pattern)");
}

// The decoder's fields every LLaMA family shares (Gemma's activation and capping its own).
LlamaConfig llama_from_hf(const HfFields& f, Family family) {
  LlamaConfig l;
  l.vocab_size = f.integer("vocab_size");
  l.context = f.integer("max_position_embeddings");
  l.max_position_embeddings = l.context;
  l.d_model = f.integer("hidden_size");
  l.heads = f.integer("num_attention_heads");
  l.num_key_value_heads = f.integer("num_key_value_heads", l.heads);
  l.intermediate_size = f.integer("intermediate_size");
  l.layers = f.integer("num_hidden_layers");
  if (family == Family::kGemma3) {
    read_gemma_rope(f, l);
  } else {
    read_rope(f, l);
  }
  l.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  l.tie_embeddings = f.flag("tie_word_embeddings", false);
  if (family != Family::kGemma3 && f.text("hidden_act", "silu") != "silu")
    f.refuse("hidden_act", "must be \"silu\" (the SwiGLU MLP)");
  if (f.flag("mlp_bias", false)) f.refuse("mlp_bias", "is not supported (no biases)");
  if (f.present("head_dim")) {
    const int64_t head_dim = f.integer("head_dim");
    if (head_dim < 1) f.refuse("head_dim", "must be at least 1");
    if (head_dim * l.heads != l.d_model) l.head_dim = head_dim;
  }
  if (family == Family::kGemma3) return l;
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (f.present(key)) f.refuse(key, "is not supported (no soft-capping)");
  }
  return l;
}

// Each family's own fields on top of the shared decoder.
LlamaConfig family_decoder_from_hf(Family family, const HfFields& f, const nlohmann::json& hf) {
  LlamaConfig l = llama_from_hf(f, family);
  switch (family) {
    case Family::kGemma3:
      read_gemma(f, hf, l);
      break;
    case Family::kQwen2:
      read_qwen_windows(f, hf, l);
      break;
    case Family::kQwen3:
    case Family::kQwen3Moe:
      if (f.flag("attention_bias", false))
        f.refuse("attention_bias", "is not supported (Qwen3's projections have none)");
      read_qwen_windows(f, hf, l);
      break;
    case Family::kMistral:
    case Family::kMixtral:
      l.sliding_window = f.present("sliding_window") ? f.integer("sliding_window") : 0;
      if (f.flag("attention_bias", false)) f.refuse("attention_bias", "is not supported");
      break;
    default:
      if (f.flag("attention_bias", false))
        f.refuse("attention_bias", "is not supported (no biases)");
      break;
  }
  if (l.sliding_window < 0) f.refuse("sliding_window", "must be at least 1");
  return l;
}

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

void add(std::vector<HfTensor>& tensors, const std::string& hf, int layer, const std::string& name,
         bool transposed = false) {
  tensors.push_back({hf, "layers." + std::to_string(layer) + "." + name, transposed});
}

std::vector<HfTensor> gpt2_tensors(const GptConfig& g) {
  std::vector<HfTensor> t;
  add(t, "transformer.wte.weight", 0, "tokens.weight");
  add(t, "transformer.wpe.weight", 0, "positions.weight");
  const std::pair<const char*, const char*> norms[] = {{"ln_1", "attention_norm"},
                                                       {"ln_2", "mlp_norm"}};
  const std::pair<const char*, const char*> linears[] = {{"attn.c_attn", "qkv"},
                                                         {"attn.c_proj", "projection"},
                                                         {"mlp.c_fc", "expand"},
                                                         {"mlp.c_proj", "contract"}};
  for (int i = 0; i < g.layers; ++i) {
    const std::string block = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [hf, ours] : norms) {
      add(t, block + hf + ".weight", i + 1, std::string(ours) + ".weight");
      add(t, block + hf + ".bias", i + 1, std::string(ours) + ".bias");
    }
    for (const auto& [hf, ours] : linears) {
      add(t, block + hf + ".weight", i + 1, std::string(ours) + ".weight", /*transposed=*/true);
      add(t, block + hf + ".bias", i + 1, std::string(ours) + ".bias");
    }
  }
  const int final_norm = static_cast<int>(g.layers) + 1;
  add(t, "transformer.ln_f.weight", final_norm, "weight");
  add(t, "transformer.ln_f.bias", final_norm, "bias");
  if (!g.tie_embeddings) add(t, "lm_head.weight", final_norm + 1, "weight");
  return t;
}

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

// The experts of a routing block: transformers' MixtralSparseMoeBlock (`block_sparse_moe`,
// router `gate`, expert j's gate, down and up projections w1, w2 and w3) or
// Qwen3MoeSparseMoeBlock (`mlp`, router `gate`, experts.j.gate_proj, down_proj, up_proj).
void add_experts(std::vector<HfTensor>& t, const MoeConfig& m, int i, bool mixtral) {
  const std::string moe =
      "model.layers." + std::to_string(i) + (mixtral ? ".block_sparse_moe." : ".mlp.");
  add(t, moe + "gate.weight", i + 1, "moe.router");
  const std::pair<const char*, const char*> mixtral_weights[] = {
      {"w1", "moe.gate_proj"}, {"w2", "moe.down_proj"}, {"w3", "moe.up_proj"}};
  const std::pair<const char*, const char*> qwen_weights[] = {
      {"gate_proj", "moe.gate_proj"}, {"down_proj", "moe.down_proj"}, {"up_proj", "moe.up_proj"}};
  for (const auto& [hf, ours] : mixtral ? mixtral_weights : qwen_weights) {
    for (int64_t e = 0; e < m.experts; ++e) {
      t.push_back({moe + "experts." + std::to_string(e) + "." + hf + ".weight",
                   "layers." + std::to_string(i + 1) + "." + ours, false, e});
    }
  }
}

std::vector<HfTensor> llama_tensors(const LlamaConfig& l, const MoeConfig* moe,
                                    bool mixtral = false) {
  std::vector<HfTensor> t;
  const std::pair<const char*, const char*> biases[] = {{"self_attn.q_proj", "q_proj"},
                                                        {"self_attn.k_proj", "k_proj"},
                                                        {"self_attn.v_proj", "v_proj"}};
  const std::pair<const char*, const char*> head_norms[] = {{"self_attn.q_norm", "q_norm"},
                                                            {"self_attn.k_norm", "k_norm"}};
  add(t, "model.embed_tokens.weight", 0, "tokens.weight");
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
        add(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
            std::string(ours) + ".weight");
    }
    for (const auto& [hf, ours] : weights) {
      if (l.sandwich_norms && std::string(ours).find("_norm") != std::string::npos) continue;
      if (routed && std::string(hf).rfind("mlp.", 0) == 0) continue;
      add(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
          std::string(ours) + ".weight");
    }
    for (const auto& [hf, ours] : biases) {
      if (l.qkv_bias)
        add(t, "model.layers." + std::to_string(i) + "." + hf + ".bias", i + 1,
            std::string(ours) + ".bias");
    }
    for (const auto& [hf, ours] : head_norms) {
      if (l.qk_norm)
        add(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
            std::string(ours) + ".weight");
    }
    if (routed) add_experts(t, *moe, i, mixtral);
  }
  const int final_norm = static_cast<int>(l.layers) + 1;
  add(t, "model.norm.weight", final_norm, "weight");
  if (!l.tie_embeddings) add(t, "lm_head.weight", final_norm + 1, "weight");
  return t;
}

io::InputError no_transformers_format(const ModelConfig& config) {
  return io::InputError("model.type \"" + type_name(config) +
                        "\" has no transformers format (only \"gpt\" and the LLaMA families)");
}

// A Mixtral transformers computes: softmax scores, no shared experts.
void check_mixtral_format(const MoeConfig& m) {
  if (m.score != RouterScore::kSoftmax)
    throw io::InputError(
        "model.router_score \"sigmoid\" has no transformers format (Mixtral's "
        "router is a softmax)");
  if (m.shared_experts > 0)
    throw io::InputError("model.shared_experts has no transformers format (Mixtral has none)");
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

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source) {
  const HfFields fields(hf, source);
  ModelConfig config;
  config.type = architecture_of(hf, fields).family;
  if (config.type == Family::kGpt) {
    config.gpt = gpt2_from_hf(fields);
  } else {
    config.llama = family_decoder_from_hf(config.type, fields, hf);
    if (config.type == Family::kMixtral) config.moe = mixtral_from_hf(fields);
    if (config.type == Family::kQwen3Moe) config.moe = qwen3_moe_from_hf(fields, hf);
  }
  // Special tokens, where config.json names one of each (null names none; a list of eos
  // ids is kept whole, its first the eos_token_id).
  auto token = [&](const char* name) {
    return hf.contains(name) && hf[name].is_number_integer() ? hf[name].get<int64_t>() : -1;
  };
  config.bos_token_id = token("bos_token_id");
  config.eos_token_id = token("eos_token_id");
  config.pad_token_id = token("pad_token_id");
  const nlohmann::json eos = hf.value("eos_token_id", nlohmann::json());
  if (eos.is_array()) {
    for (const auto& id : eos) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw io::InputError(source + ": eos_token_id must be a token id or a list of them");
      config.eos_token_ids.push_back(id.get<int64_t>());
    }
    if (!config.eos_token_ids.empty()) config.eos_token_id = config.eos_token_ids.front();
  }
  return config;
}

namespace {

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

// The windows as a family's config.json says them, or refused where it cannot.
void write_windows(Family family, const LlamaConfig& l, nlohmann::json& hf) {
  const bool windows = l.sliding_window > 0 && l.max_window_layers < l.layers;
  switch (family) {
    case Family::kQwen2:
    case Family::kQwen3:
    case Family::kQwen3Moe: {
      hf["use_sliding_window"] = windows;
      hf["sliding_window"] = windows ? nlohmann::json(l.sliding_window) : nlohmann::json(nullptr);
      hf["max_window_layers"] = windows ? l.max_window_layers : l.layers;
      nlohmann::json types = nlohmann::json::array();
      for (int64_t i = 0; i < l.layers; ++i)
        types.push_back(windows && l.slides(i) ? "sliding_attention" : "full_attention");
      hf["layer_types"] = types;
      return;
    }
    case Family::kMistral:
    case Family::kMixtral:
      if (windows && l.max_window_layers > 0)
        throw io::InputError(
            "model.max_window_layers has no transformers format for model.type \"" +
            name_of(family) + "\" (its windows are in every block)");
      hf["sliding_window"] = windows ? nlohmann::json(l.sliding_window) : nlohmann::json(nullptr);
      return;
    case Family::kGemma3: {
      if (l.sliding_window_pattern < 1 && windows)
        throw io::InputError(
            "model.sliding_window_pattern 0 has no transformers format for model.type "
            "\"gemma3\" (its sliding blocks follow a pattern)");
      const int64_t pattern = l.sliding_window_pattern > 0 ? l.sliding_window_pattern : 1;
      hf["sliding_window"] =
          l.sliding_window > 0 ? nlohmann::json(l.sliding_window) : nlohmann::json(nullptr);
      hf["sliding_window_pattern"] = pattern;
      nlohmann::json types = nlohmann::json::array();
      for (int64_t i = 0; i < l.layers; ++i)
        types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
      hf["layer_types"] = types;
      return;
    }
    default:
      if (windows)
        throw io::InputError(
            "model.sliding_window has no transformers format for model.type \"llama\" (export "
            "as \"mistral\" or \"qwen2\")");
  }
}

// Gemma 3's own fields beside the shared ones.
void write_gemma(const LlamaConfig& l, nlohmann::json& hf) {
  hf.erase("hidden_act");
  hf["hidden_activation"] = "gelu_pytorch_tanh";
  hf["rope_parameters"] = {
      {"full_attention", rope_parameters_of(l)},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", l.rope_local_base_freq}}}};
  hf["rope_local_base_freq"] = l.rope_local_base_freq;
  // An integer in transformers' Gemma3TextConfig (it refuses 256.0).
  const double scalar =
      l.query_pre_attn_scalar > 0 ? l.query_pre_attn_scalar : static_cast<double>(l.head_width());
  hf["query_pre_attn_scalar"] = scalar == std::floor(scalar)
                                    ? nlohmann::json(static_cast<int64_t>(scalar))
                                    : nlohmann::json(scalar);
  hf["final_logit_softcapping"] = l.final_logit_softcapping > 0
                                      ? nlohmann::json(l.final_logit_softcapping)
                                      : nlohmann::json(nullptr);
  hf["attn_logit_softcapping"] = nullptr;
  hf["attention_bias"] = false;
  hf["use_bidirectional_attention"] = false;
}

nlohmann::json llama_hf_config(const ModelConfig& config) {
  const LlamaConfig l = decoder_config(config);
  const Architecture& architecture = *architecture_of_family(config.type);
  nlohmann::json hf = {{"architectures", {architecture.name}},
                       {"model_type", architecture.model_type},
                       {"vocab_size", l.vocab_size},
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
  if (config.type == Family::kLlama || config.type == Family::kQwen3 ||
      config.type == Family::kQwen3Moe) {
    hf["attention_bias"] = false;
    hf["mlp_bias"] = false;
  }
  write_windows(config.type, l, hf);
  if (config.type == Family::kGemma3) write_gemma(l, hf);
  if (!routes_experts(config)) return hf;
  check_mixtral_format(config.moe);
  if (config.type == Family::kQwen3Moe) {
    hf["num_experts"] = config.moe.experts;
    hf["num_experts_per_tok"] = config.moe.experts_per_token;
    hf["norm_topk_prob"] = config.moe.norm_topk_prob;
    hf["moe_intermediate_size"] = config.moe.moe_intermediate_size > 0
                                      ? config.moe.moe_intermediate_size
                                      : l.intermediate_size;
    hf["decoder_sparse_step"] = config.moe.decoder_sparse_step;
    hf["mlp_only_layers"] = config.moe.mlp_only_layers;
    hf["router_aux_loss_coef"] = config.moe.router_aux_loss_coef;
    hf["output_router_logits"] = false;
    return hf;
  }
  check_mixtral_only_format(config.moe);
  hf["num_local_experts"] = config.moe.experts;
  hf["num_experts_per_tok"] = config.moe.experts_per_token;
  hf["router_aux_loss_coef"] = config.moe.router_aux_loss_coef;
  hf["router_jitter_noise"] = 0.0;
  hf["output_router_logits"] = false;
  return hf;
}

nlohmann::json hf_model_config_of(const ModelConfig& config) {
  if (config.type == Family::kGpt) {
    const GptConfig& g = config.gpt;
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", g.vocab_size},
            {"n_positions", g.context},
            {"n_embd", g.d_model},
            {"n_head", g.heads},
            {"n_layer", g.layers},
            {"n_inner", nullptr},
            {"activation_function", g.gelu == Gelu::kTanh ? "gelu_new" : "gelu"},
            {"layer_norm_epsilon", kLayerNormEps},
            {"resid_pdrop", g.dropout},
            {"embd_pdrop", g.dropout},
            {"attn_pdrop", g.dropout},
            {"tie_word_embeddings", g.tie_embeddings},
            {"torch_dtype", "float32"}};
  }
  if (llama_family(config)) return llama_hf_config(config);
  throw no_transformers_format(config);
}

}  // namespace

nlohmann::json hf_config_of(const ModelConfig& config) {
  // The special tokens the model came with (import --hf), or explicitly none: transformers
  // would otherwise assume its own defaults (GPT-2's 50256, LLaMA's 1 and 2).
  nlohmann::json hf = hf_model_config_of(config);
  auto token = [](int64_t id) { return id >= 0 ? nlohmann::json(id) : nlohmann::json(nullptr); };
  hf["bos_token_id"] = token(config.bos_token_id);
  hf["eos_token_id"] = config.eos_token_ids.empty() ? token(config.eos_token_id)
                                                    : nlohmann::json(config.eos_token_ids);
  if (config.pad_token_id >= 0) hf["pad_token_id"] = config.pad_token_id;
  return hf;
}

std::vector<HfTensor> hf_tensors(const ModelConfig& config) {
  if (config.type == Family::kGpt) return gpt2_tensors(config.gpt);
  if (routes_experts(config)) {
    check_mixtral_format(config.moe);
    if (config.type == Family::kMixtral) check_mixtral_only_format(config.moe);
    return llama_tensors(decoder_config(config), &config.moe, config.type == Family::kMixtral);
  }
  if (llama_family(config)) return llama_tensors(decoder_config(config), nullptr);
  throw no_transformers_format(config);
}

bool hf_buffer(const std::string& hf_name) {
  auto ends_with = [&](const std::string& tail) {
    return hf_name.size() >= tail.size() &&
           hf_name.compare(hf_name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") ||
         ends_with(".rotary_emb.inv_freq");
}

}  // namespace pipetrain::models
