#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pipetrain/config/key_table.h"

// The `lora` config section (torch-free: the planner reads it too). What it does to a
// stage's layers: module/lora.h.
namespace pipetrain::module {

struct LoraConfig {
  int64_t rank = 0;  // 0: no adapters, every parameter trained
  double alpha = 16;
  double dropout = 0;
  // transformers' names of the adapted linears (peft's target_modules).
  std::vector<std::string> target_modules{"q_proj", "v_proj"};
  std::vector<int64_t> layers{};  // the decoder blocks adapted (transformers' layers.N); empty: all

  bool enabled() const { return rank > 0; }
  // Whether decoder block `block` gets adapters (-1: not a block).
  bool adapts_block(int64_t block) const;
  bool targets(std::string_view linear) const;
};

// The keys of the `lora` section, each bound once.
const config::KeyTable<LoraConfig>& lora_keys();

// The linears LoRA can adapt, by transformers' names.
const std::vector<std::string>& lora_targets();

// Refuses a lora section that adapts nothing of a model (`model` its type's name) with
// `adapted` adapted linears and `blocks` decoder blocks: InputError naming lora.layers (a
// block it lacks) or lora.target_modules. What train and plan both check.
void check_adapted(const LoraConfig& lora, const std::string& model, double adapted,
                   int64_t blocks);

// Whether a parameter's name (any prefix) is an adapter's: it ends in lora_A or lora_B.
bool is_adapter(std::string_view name);

}  // namespace pipetrain::module
