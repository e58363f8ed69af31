#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/models/gpt/gpt_config.h"
#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/group.h"
#include "pipetrain/tensor_parallel/token_reduction.h"

namespace pipetrain::models {

// Layers: embedding (tie key "embed"), `layers` pre-LayerNorm blocks with causal
// self-attention and a GELU MLP, final LayerNorm, LM head. Input: token ids [batch, seq]
// (int64); output: logits [batch, seq, vocab / group size], this rank's vocabulary slice.
// With a tensor-parallel group the embedding, attention heads, MLP and head are split
// over it (Megatron-LM's layout); the full weights are the same for every group size.
// With a context-parallel group each rank computes its load-balanced slice of the sequence
// (context_parallel::local_positions; the input stays the whole [batch, seq] and the
// output is the slice's logits), attention passing keys and values around the group.
std::vector<module::LayerSpec> gpt_layers(const GptConfig& config,
                                          const tensor_parallel::Group& group = {},
                                          const context_parallel::Group& context = {});

// Cross-entropy of the (vocabulary-sliced) logits against labels [batch, seq] (under
// context parallelism, this rank's slice of them): the mean over the labels that count
// (not tensor_parallel::kIgnoreIndex), or with kSum their sum.
module::LossFunction gpt_loss(
    const tensor_parallel::Group& group = {}, const context_parallel::Group& context = {},
    tensor_parallel::TokenReduction reduction = tensor_parallel::TokenReduction::kMean);

}  // namespace pipetrain::models
