#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::models {

struct GptConfig {
  int64_t vocab_size = 256;
  int64_t context = 64;  // longest sequence
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t layers = 4;  // transformer blocks
  double dropout = 0.0;
  bool tie_embeddings = true;  // the LM head uses the token embedding, transposed
};

// Layers: embedding (tie key "embed"), `layers` pre-LayerNorm blocks with causal
// self-attention and a GELU MLP, final LayerNorm, LM head. Input: token ids [batch, seq]
// (int64); output: logits [batch, seq, vocab].
std::vector<LayerSpec> gpt_layers(const GptConfig& config);

// Mean cross-entropy of logits [batch, seq, vocab] against labels [batch, seq].
at::Tensor gpt_loss(const Activation& logits, const Activation& labels);

}  // namespace pipetrain::models
