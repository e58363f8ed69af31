#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/tensor_parallel/lora.h"

// Fine-tuning with LoRA adapters: the `lora` config section, and what it does to a stage's
// layers. Every parameter of the model is frozen (no gradient, no optimizer state, no
// ZeRO shard); the linears named by `target_modules` in the chosen decoder blocks get
// adapters (tensor_parallel/lora.h), the only parameters trained.
namespace pipetrain::module {

struct LoraConfig {
  int64_t rank = 0;  // 0: no adapters, every parameter trained
  double alpha = 16;
  double dropout = 0;
  // transformers' names of the adapted linears (peft's target_modules).
  std::vector<std::string> target_modules{"q_proj", "v_proj"};
  std::vector<int64_t> layers;  // the decoder blocks adapted (transformers' layers.N); empty: all

  bool enabled() const { return rank > 0; }
  tensor_parallel::LoraOptions options() const { return {rank, alpha, dropout}; }
};

// The keys of the `lora` section, each bound once.
const config::KeyTable<LoraConfig>& lora_keys();

// The linears LoRA can adapt, by transformers' names.
const std::vector<std::string>& lora_targets();

// Whether a parameter's name (any prefix) is an adapter's: it ends in lora_A or lora_B.
bool is_adapter(std::string_view name);

// Freezes every parameter of `layer` and, when `block` is a decoder block that `config`
// chooses, adds adapters to its linears that `config` targets; returns how many it adapted.
int adapt_layer(torch::nn::Module& layer, const LoraConfig& config, int64_t block);

}  // namespace pipetrain::module
