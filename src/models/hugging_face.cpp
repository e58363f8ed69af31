#include "pipetrain/models/hugging_face.h"

#include <cmath>

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

std::string architecture_of(const nlohmann::json& hf, const HfFields& fields) {
  if (hf.contains("architectures") && hf["architectures"].is_array() &&
      !hf["architectures"].empty() && hf["architectures"][0].is_string()) {
    return hf["architectures"][0].get<std::string>();
  }
  const std::string type = fields.text("model_type", "");
  if (type == "gpt2") return "GPT2LMHeadModel";
  if (type == "llama") return "LlamaForCausalLM";
  if (type == "mixtral") return "MixtralForCausalLM";
  fields.refuse("architectures",
                "is missing (and model_type is not \"gpt2\", \"llama\" or \"mixtral\")");
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

// transformers 4 writes rope_theta (and rope_scaling for variants), 5 writes
// rope_parameters {rope_type, rope_theta}; only the plain rotation is computed.
double rope_theta_of(const HfFields& f) {
  if (f.present("rope_scaling")) f.refuse("rope_scaling", "is not supported (plain rotary)");
  if (!f.present("rope_parameters")) return f.number("rope_theta", 10000.0);
  const HfFields rope(f.get("rope_parameters"), f.source() + ": rope_parameters");
  if (rope.text("rope_type", "default") != "default")
    rope.refuse("rope_type", "must be \"default\" (plain rotary)");
  return rope.number("rope_theta", f.number("rope_theta", 10000.0));
}

LlamaConfig llama_from_hf(const HfFields& f) {
  LlamaConfig l;
  l.vocab_size = f.integer("vocab_size");
  l.context = f.integer("max_position_embeddings");
  l.d_model = f.integer("hidden_size");
  l.heads = f.integer("num_attention_heads");
  l.num_key_value_heads = f.integer("num_key_value_heads", l.heads);
  l.intermediate_size = f.integer("intermediate_size");
  l.layers = f.integer("num_hidden_layers");
  l.rope_theta = rope_theta_of(f);
  l.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  l.tie_embeddings = f.flag("tie_word_embeddings", false);
  if (f.text("hidden_act", "silu") != "silu")
    f.refuse("hidden_act", "must be \"silu\" (the SwiGLU MLP)");
  if (f.flag("attention_bias", false)) f.refuse("attention_bias", "is not supported (no biases)");
  if (f.flag("mlp_bias", false)) f.refuse("mlp_bias", "is not supported (no biases)");
  if (f.present("head_dim") && f.integer("head_dim") * l.heads != l.d_model)
    f.refuse("head_dim", "must be hidden_size / num_attention_heads");
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
  if (f.present("sliding_window")) f.refuse("sliding_window", "is not supported (full attention)");
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

// transformers' MixtralSparseMoeBlock: the router is `gate`, expert j's gate, down and up
// projections are w1, w2 and w3.
void add_mixtral_experts(std::vector<HfTensor>& t, const MoeConfig& m, int i) {
  const std::string moe = "model.layers." + std::to_string(i) + ".block_sparse_moe.";
  add(t, moe + "gate.weight", i + 1, "moe.router");
  const std::pair<const char*, const char*> weights[] = {
      {"w1", "moe.gate_proj"}, {"w2", "moe.down_proj"}, {"w3", "moe.up_proj"}};
  for (const auto& [hf, ours] : weights) {
    for (int64_t e = 0; e < m.experts; ++e) {
      t.push_back({moe + "experts." + std::to_string(e) + "." + hf + ".weight",
                   "layers." + std::to_string(i + 1) + "." + ours, false, e});
    }
  }
}

std::vector<HfTensor> llama_tensors(const LlamaConfig& l, const MoeConfig* moe) {
  std::vector<HfTensor> t;
  add(t, "model.embed_tokens.weight", 0, "tokens.weight");
  const std::pair<const char*, const char*> weights[] = {
      {"input_layernorm", "attention_norm"}, {"self_attn.q_proj", "q_proj"},
      {"self_attn.k_proj", "k_proj"},        {"self_attn.v_proj", "v_proj"},
      {"self_attn.o_proj", "o_proj"},        {"post_attention_layernorm", "mlp_norm"},
      {"mlp.gate_proj", "gate_proj"},        {"mlp.up_proj", "up_proj"},
      {"mlp.down_proj", "down_proj"}};
  for (int i = 0; i < l.layers; ++i) {
    for (const auto& [hf, ours] : weights) {
      if (moe && std::string(hf).rfind("mlp.", 0) == 0) continue;
      add(t, "model.layers." + std::to_string(i) + "." + hf + ".weight", i + 1,
          std::string(ours) + ".weight");
    }
    if (moe) add_mixtral_experts(t, *moe, i);
  }
  const int final_norm = static_cast<int>(l.layers) + 1;
  add(t, "model.norm.weight", final_norm, "weight");
  if (!l.tie_embeddings) add(t, "lm_head.weight", final_norm + 1, "weight");
  return t;
}

io::InputError no_transformers_format(const ModelConfig& config) {
  return io::InputError("model.type \"" + type_name(config) +
                        "\" has no transformers format (only \"gpt\", \"llama\" and "
                        "\"mixtral\")");
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

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source) {
  const HfFields fields(hf, source);
  const std::string architecture = architecture_of(hf, fields);
  ModelConfig config;
  if (architecture == "GPT2LMHeadModel") {
    config.type = Family::kGpt;
    config.gpt = gpt2_from_hf(fields);
  } else if (architecture == "LlamaForCausalLM") {
    config.type = Family::kLlama;
    config.llama = llama_from_hf(fields);
  } else if (architecture == "MixtralForCausalLM") {
    config.type = Family::kMixtral;
    config.llama = llama_from_hf(fields);
    config.moe = mixtral_from_hf(fields);
  } else {
    fields.refuse("architectures", "\"" + architecture +
                                       "\" is not one pipetrain imports (GPT2LMHeadModel, "
                                       "LlamaForCausalLM, MixtralForCausalLM)");
  }
  // Special tokens, where config.json names one of each (a list or null names none here).
  auto token = [&](const char* name) {
    return hf.contains(name) && hf[name].is_number_integer() ? hf[name].get<int64_t>() : -1;
  };
  config.bos_token_id = token("bos_token_id");
  config.eos_token_id = token("eos_token_id");
  return config;
}

namespace {

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
  if (llama_family(config)) {
    const LlamaConfig& l = config.llama;
    const bool mixtral = config.type == Family::kMixtral;
    nlohmann::json hf = {
        {"architectures", {mixtral ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
        {"model_type", type_name(config)},
        {"vocab_size", l.vocab_size},
        {"max_position_embeddings", l.context},
        {"hidden_size", l.d_model},
        {"num_attention_heads", l.heads},
        {"num_key_value_heads", l.num_key_value_heads},
        {"head_dim", l.d_model / l.heads},
        {"intermediate_size", l.intermediate_size},
        {"num_hidden_layers", l.layers},
        {"rope_theta", l.rope_theta},  // transformers 4; 5 reads rope_parameters
        {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", l.rope_theta}}},
        {"rms_norm_eps", l.rms_norm_eps},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"tie_word_embeddings", l.tie_embeddings},
        {"torch_dtype", "float32"}};
    if (!mixtral) return hf;
    check_mixtral_format(config.moe);
    hf["num_local_experts"] = config.moe.experts;
    hf["num_experts_per_tok"] = config.moe.experts_per_token;
    hf["router_aux_loss_coef"] = config.moe.router_aux_loss_coef;
    hf["router_jitter_noise"] = 0.0;
    hf["sliding_window"] = nullptr;
    hf["output_router_logits"] = false;
    return hf;
  }
  throw no_transformers_format(config);
}

}  // namespace

nlohmann::json hf_config_of(const ModelConfig& config) {
  // The special tokens the model came with (import --hf), or explicitly none: transformers
  // would otherwise assume its own defaults (GPT-2's 50256, LLaMA's 1 and 2).
  nlohmann::json hf = hf_model_config_of(config);
  auto token = [](int64_t id) { return id >= 0 ? nlohmann::json(id) : nlohmann::json(nullptr); };
  hf["bos_token_id"] = token(config.bos_token_id);
  hf["eos_token_id"] = token(config.eos_token_id);
  return hf;
}

std::vector<HfTensor> hf_tensors(const ModelConfig& config) {
  if (config.type == Family::kGpt) return gpt2_tensors(config.gpt);
  if (config.type == Family::kLlama) return llama_tensors(config.llama, nullptr);
  if (config.type == Family::kMixtral) {
    check_mixtral_format(config.moe);
    return llama_tensors(config.llama, &config.moe);
  }
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
