#pragma once

#include <cstdint>

namespace pipetrain::models {

// The MLP's nonlinearity: GELU exactly (erf), or its tanh approximation (GPT-2's gelu_new).
enum class Gelu { kExact, kTanh };

// The GPT's sizes (see gpt_layers()).
struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;  // longest sequence
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 4;  // transformer blocks
  double dropout = 0.0;
  Gelu gelu = Gelu::kExact;
  bool tie_embeddings = true;  // the LM head uses the token embedding, transposed
};

}  // namespace pipetrain::models
