#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/models/hf_format.h"
#include "pipetrain/models/model_config.h"

// The built-in language models as transformers stores them (GPT2LMHeadModel,
// LlamaForCausalLM, MixtralForCausalLM), without torch: the model a config.json describes, the
// config.json of a model, and the transformers name of each of the model's tensors.
namespace pipetrain::models {

// The model a transformers config.json describes. InputError naming `source` and the field
// for an architecture or a setting pipetrain does not compute (e.g. rope_scaling).
ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source);

// The config.json transformers reads for `config` (a GPT, LLaMA or Mixtral with softmax
// scores and no shared experts; InputError otherwise).
nlohmann::json hf_config_of(const ModelConfig& config);

// Every tensor of the model in layer order (a tied head's weight is the embedding's).
std::vector<HfTensor> hf_tensors(const ModelConfig& config);

// Whether a transformers file's tensor is no weight (GPT-2's attention-mask buffers, the
// rotary inv_freq older LLaMA files hold).
bool hf_buffer(const std::string& hf_name);

}  // namespace pipetrain::models
