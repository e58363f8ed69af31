#pragma once

#include <cstdint>

namespace pipetrain::models {

// How the rotary embeddings' inverse frequencies are computed (transformers' rope_type).
enum class RopeType {
  kDefault,  // theta^(-2i / head_dim)
  kLinear,   // the default divided by `factor` (positions interpolated)
  kDynamic,  // NTK: theta grown with the sequence past max_position_embeddings
  kLlama3,   // LLaMA 3.1: low frequencies divided by `factor`, a smooth band between
  kYarn,     // YaRN: interpolated and extrapolated frequencies blended, cos/sin scaled
};

// rope_parameters beyond rope_theta, named as transformers names them; each rope_type
// reads its own.
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                           // linear, dynamic, llama3, yarn
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn: the pretraining context
  double beta_fast = 32.0;                       // yarn: the ramp's bounds, in rotations
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // yarn: cos and sin scaled by it; 0: 0.1 ln(factor) + 1
  bool truncate = true;           // yarn: the ramp's bounds rounded outwards
  bool operator==(const RopeScaling&) const = default;
};

// The LLaMA model's sizes (see llama_layers()), named as in transformers' LlamaConfig
// where the GPT's names do not already say it. The families built on it (Qwen2, Qwen3,
// Mistral, Gemma 3) set the flags that say what they fix; no key does.
struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;             // the sequence trained on
  int64_t d_model = 64;             // hidden_size
  int64_t heads = 4;                // query heads (num_attention_heads)
  int64_t num_key_value_heads = 2;  // grouped-query attention: heads share key/value heads
  int64_t head_dim = 0;             // each head's width; 0: d_model / heads
  int64_t intermediate_size = 176;  // the SwiGLU MLP's width
  int64_t layers = 4;               // decoder blocks (num_hidden_layers)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling{};
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = false;  // the LM head uses the token embedding, transposed
  // The longest sequence the rotation was trained for (transformers' name); `context` may
  // be any length up to it. 0: `context`.
  int64_t max_position_embeddings = 0;
  // Each position attends to the last `sliding_window` positions (itself included) in
  // blocks max_window_layers.. (Mistral: all; Qwen: the blocks past max_window_layers);
  // 0: every block attends to every earlier position.
  int64_t sliding_window = 0;
  int64_t max_window_layers = 0;
  bool qkv_bias = false;  // q, k and v projections with biases (Qwen2)
  bool qk_norm = false;   // RMSNorm over each query and key head before rotation (Qwen3)

  // Gemma 3's settings (model keys of model.type gemma3 only).
  // Blocks (i + 1) % sliding_window_pattern != 0 attend within `sliding_window`, the others
  // to every earlier position; 0: Qwen's and Mistral's rule (max_window_layers).
  int64_t sliding_window_pattern = 0;
  double rope_local_base_freq = 10000.0;  // the sliding blocks' rotary base (no scaling)
  double query_pre_attn_scalar = 0;       // attention scores scaled by its -1/2; 0: head_dim's
  double final_logit_softcapping = 0;     // logits = cap · tanh(logits / cap); 0: none
  // What the family fixes (Gemma 3: all four).
  bool unit_offset_norms = false;  // RMSNorms scale by 1 + w (w from 0), in float32
  bool sandwich_norms = false;     // norms after attention and after the MLP too
  bool scaled_embeddings = false;  // token embeddings multiplied by √d_model
  bool gelu_mlp = false;           // the gated MLP's activation is GELU (tanh), not SiLU

  int64_t head_width() const { return head_dim > 0 ? head_dim : d_model / heads; }
  int64_t positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : context;
  }
  // Whether block `layer` (0-based) attends within the sliding window.
  bool slides(int64_t layer) const { return sliding_window > 0 && local(layer); }
  // Whether block `layer` is a local one: sliding where there is a window (Gemma's pattern,
  // else the blocks from max_window_layers on).
  bool local(int64_t layer) const {
    return sliding_window_pattern > 0 ? (layer + 1) % sliding_window_pattern != 0
                                      : layer >= max_window_layers;
  }
  // Whether block `layer` rotates with rope_local_base_freq (Gemma's local blocks).
  bool local_rotation(int64_t layer) const {
    return sliding_window_pattern > 0 && layer >= 0 && local(layer);
  }
};

}  // namespace pipetrain::models
