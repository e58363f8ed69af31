#pragma once

#include <optional>
#include <vector>

#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/models/llama/llama_config.h"
#include "pipetrain/models/moe/moe_config.h"
#include "pipetrain/module/layer.h"
#include "pipetrain/tensor_parallel/group.h"

namespace pipetrain::models {

// Layers of a LLaMA-family decoder, computed as transformers' LlamaForCausalLM computes
// it: token embedding (tie key "embed" when tied), `layers` pre-RMSNorm blocks with causal
// grouped-query self-attention under rotary position embeddings and a SwiGLU MLP, no
// biases, a final RMSNorm and the LM head. Input: token ids [batch, seq] (int64); output:
// logits [batch, seq, vocab / group size], this rank's vocabulary slice. With a
// tensor-parallel group the embedding, query and key/value heads, MLP and head are split
// over it; the full weights are the same for every group size. With a context-parallel
// group, as gpt_layers (rotary embeddings at the true positions). The loss is gpt_loss().
// With `moe` each block's MLP is a mixture of experts (moe.h) of intermediate_size each:
// transformers' MixtralForCausalLM (not with context or sequence parallelism), its experts
// split over `experts`.
std::vector<module::LayerSpec> llama_layers(const LlamaConfig& config,
                                            const tensor_parallel::Group& group = {},
                                            const context_parallel::Group& context = {},
                                            const std::optional<MoeConfig>& moe = {},
                                            const expert_parallel::Group& experts = {});

}  // namespace pipetrain::models
