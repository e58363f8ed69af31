#include <cmath>

#include "models/llama/llama_hf.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/models/model_config.h"

// Gemma 3's text model (transformers' Gemma3ForCausalLM): the decoder with q/k norms, norms
// around attention and the MLP that scale by 1 + w, scaled embeddings, a GELU MLP, sliding
// blocks in a pattern with their own rotation, and a soft-capped head.
namespace pipetrain::models {
namespace {

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

void write_gemma_windows(const LlamaConfig& l, nlohmann::json& hf) {
  if (l.sliding_window_pattern < 1 && has_windows(l))
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
}

void bind_gemma_keys(config::KeyTable<ModelConfig>& t) {
  t.integer("model.sliding_window_pattern", PIPETRAIN_FIELD(llama.sliding_window_pattern),
            "blocks i with (i + 1) % N != 0 attend within `sliding_window` (with "
            "`rope_local_base_freq`), the rest to every position (with `rope_theta` and "
            "`rope_scaling`); 0: `max_window_layers`' rule",
            config::at_least(0))
      .number("model.rope_local_base_freq", PIPETRAIN_FIELD(llama.rope_local_base_freq),
              "the sliding blocks' rotary base (never scaled)", config::above(0))
      .number("model.query_pre_attn_scalar", PIPETRAIN_FIELD(llama.query_pre_attn_scalar),
              "attention scores scaled by its inverse square root; 0: `head_dim`'s",
              config::at_least(0))
      .number("model.final_logit_softcapping", PIPETRAIN_FIELD(llama.final_logit_softcapping),
              "logits = cap · tanh(logits / cap); 0: not capped", config::at_least(0));
}

}  // namespace

const FamilyRow* gemma3_family_row() {
  static const FamilyRow row = decoder_family({
      .name = "gemma3",
      .hf_architecture = "Gemma3ForCausalLM",
      .hf_model_type = "gemma3_text",
      .preset =
          [](const LlamaConfig& configured, LlamaConfig& decoder) {
            decoder.qk_norm = decoder.unit_offset_norms = decoder.sandwich_norms =
                decoder.scaled_embeddings = decoder.gelu_mlp = true;
            decoder.sliding_window_pattern = configured.sliding_window_pattern;
          },
      .keys = bind_gemma_keys,
      .from_hf =
          [](const HfFields& f, const nlohmann::json& hf, ModelConfig& config) {
            read_gemma_rope(f, config.llama);
            read_gemma(f, hf, config.llama);
          },
      .to_hf =
          [](const ModelConfig&, const LlamaConfig& l, nlohmann::json& hf) {
            write_gemma_windows(l, hf);
            write_gemma(l, hf);
          },
  });
  return &row;
}

}  // namespace pipetrain::models
