#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "pipetrain/models/family.h"
#include "pipetrain/models/hf_format.h"

// A family of the LLaMA decoder as one row: what it fixes on the decoder and its own
// config.json fields; the rest (keys, build, costs, tensor names, capabilities) is the
// decoder's. Each built-in decoder family's file (src/models/<family>/family.cpp) is one
// call; a program registers its own the same way (register_family(decoder_family({...}))).
namespace pipetrain::models {

struct DecoderFamily {
  std::string name;  // model.type
  std::string hf_architecture;
  std::string hf_model_type;
  // What the family fixes on the decoder, from the configured one (`configured`: the
  // model.* keys as read; `decoder` starts from them with every family switch off).
  std::function<void(const LlamaConfig& configured, LlamaConfig& decoder)> preset{};
  // With expert names: its blocks route tokens to experts, named so in transformers' files.
  bool routes_experts = false;
  std::string expert_block{};  // e.g. "mlp"; the router is `<block>.gate`
  std::string expert_gate{}, expert_down{}, expert_up{};
  // Keys only it reads (bound after `model.type <name>`).
  std::function<void(config::KeyTable<ModelConfig>&)> keys{};
  // Its config.json fields beyond the decoder's sizes (rotation, activation, windows,
  // biases, experts), into `config` whose `llama` holds the sizes; and its fields written
  // over the decoder's shared ones. InputError for what it cannot hold.
  std::function<void(const HfFields& f, const nlohmann::json& hf, ModelConfig& config)> from_hf{};
  std::function<void(const ModelConfig& config, const LlamaConfig& decoder, nlohmann::json& hf)>
      to_hf{};
  // Refuses (InputError) what its transformers class cannot hold before tensors are named.
  std::function<void(const ModelConfig& config)> check_format{};
};

FamilyRow decoder_family(DecoderFamily spec);

}  // namespace pipetrain::models
