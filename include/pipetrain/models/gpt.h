#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/models/gpt_config.h"
#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/group.h"

namespace pipetrain::models {

// Layers: embedding (tie key "embed"), `layers` pre-LayerNorm blocks with causal
// self-attention and a GELU MLP, final LayerNorm, LM head. Input: token ids [batch, seq]
// (int64); output: logits [batch, seq, vocab / group size], this rank's vocabulary slice.
// With a tensor-parallel group the embedding, attention heads, MLP and head are split
// over it (Megatron-LM's layout); the full weights are the same for every group size.
std::vector<module::LayerSpec> gpt_layers(const GptConfig& config,
                                          const tensor_parallel::Group& group = {});

// Mean cross-entropy of the (vocabulary-sliced) logits against labels [batch, seq].
module::LossFunction gpt_loss(const tensor_parallel::Group& group = {});

}  // namespace pipetrain::models
