#pragma once

#include <cstdint>

namespace pipetrain::models {

// The LLaMA model's sizes (see llama_layers()), named as in transformers' LlamaConfig
// where the GPT's names do not already say it.
struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;             // longest sequence (max_position_embeddings)
  int64_t d_model = 64;             // hidden_size
  int64_t heads = 4;                // query heads (num_attention_heads)
  int64_t num_key_value_heads = 2;  // grouped-query attention: heads share key/value heads
  int64_t intermediate_size = 176;  // the SwiGLU MLP's width
  int64_t layers = 4;               // decoder blocks (num_hidden_layers)
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_embeddings = false;  // the LM head uses the token embedding, transposed
};

}  // namespace pipetrain::models
