#pragma once

#include <torch/nn/module.h>

#include <cstdint>

#include "pipetrain/module/lora_config.h"
#include "pipetrain/tensor_parallel/lora.h"

// Fine-tuning with LoRA adapters, what the `lora` section (lora_config.h) does to a stage's
// layers: every parameter of the model is frozen (no gradient, no optimizer state, no ZeRO
// shard); the linears named by `target_modules` in the chosen decoder blocks get adapters
// (tensor_parallel/lora.h), the only parameters trained.
namespace pipetrain::module {

inline tensor_parallel::LoraOptions lora_options(const LoraConfig& config) {
  return {config.rank, config.alpha, config.dropout};
}

// Freezes every parameter of `layer` and, when `block` is a decoder block that `config`
// chooses, adds adapters to its linears that `config` targets; returns how many it adapted.
int adapt_layer(torch::nn::Module& layer, const LoraConfig& config, int64_t block);

}  // namespace pipetrain::module
