#pragma once

#include <nlohmann/json.hpp>

#include "pipetrain/models/hf_format.h"
#include "pipetrain/models/model_config.h"

// Qwen3's transformers fields, which Qwen3-MoE shares: the rotation, SiLU, no attention
// bias, Qwen's sliding windows.
namespace pipetrain::models {

void read_qwen3_fields(const HfFields& f, const nlohmann::json& hf, LlamaConfig& l);
void write_qwen3_fields(const LlamaConfig& l, nlohmann::json& hf);

}  // namespace pipetrain::models
