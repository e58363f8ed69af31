#include "models/hugging_face.h"

#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

// The families with a transformers format, as a message lists them.
std::string architecture_list() {
  std::string list;
  for (const FamilyRow* row : families()) {
    if (row->from_hf) list += (list.empty() ? "" : ", ") + row->hf_architecture;
  }
  return list;
}

// The family a config.json names: by its architectures[0], else its model_type.
const FamilyRow& family_of(const nlohmann::json& hf, const HfFields& fields) {
  if (hf.contains("architectures") && hf["architectures"].is_array() &&
      !hf["architectures"].empty() && hf["architectures"][0].is_string()) {
    const std::string name = hf["architectures"][0].get<std::string>();
    for (const FamilyRow* row : families()) {
      if (row->from_hf && name == row->hf_architecture) return *row;
    }
    fields.refuse("architectures",
                  "\"" + name + "\" is not one pipetrain imports (" + architecture_list() + ")");
  }
  const std::string type = fields.text("model_type", "");
  for (const FamilyRow* row : families()) {
    if (row->from_hf && !type.empty() && type == row->hf_model_type) return *row;
  }
  fields.refuse("architectures",
                "is missing (and model_type \"" + type + "\" is not one pipetrain imports)");
}

// The family's transformers format, or InputError for one without.
const FamilyRow& with_format(const ModelConfig& config) {
  if (config.type->hf_architecture.empty() || !config.type->to_hf || !config.type->tensors)
    throw io::InputError("model.type \"" + type_name(config) + "\" has no transformers format (" +
                         architecture_list() + " have one)");
  return *config.type;
}

}  // namespace

ModelConfig model_config_from_hf(const nlohmann::json& hf, const std::string& source) {
  const HfFields fields(hf, source);
  ModelConfig config;
  const FamilyRow& row = family_of(hf, fields);
  config.type = &row;
  row.from_hf(fields, hf, config);
  // Special tokens, where config.json names one of each (null names none; a list of eos
  // ids is kept whole, its first the eos_token_id).
  auto token = [&](const char* name) {
    return hf.contains(name) && hf[name].is_number_integer() ? hf[name].get<int64_t>() : -1;
  };
  config.bos_token_id = token("bos_token_id");
  config.eos_token_id = token("eos_token_id");
  config.pad_token_id = token("pad_token_id");
  const nlohmann::json eos = hf.value("eos_token_id", nlohmann::json());
  if (eos.is_array()) {
    for (const auto& id : eos) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        throw io::InputError(source + ": eos_token_id must be a token id or a list of them");
      config.eos_token_ids.push_back(id.get<int64_t>());
    }
    if (!config.eos_token_ids.empty()) config.eos_token_id = config.eos_token_ids.front();
  }
  return config;
}

nlohmann::json hf_config_of(const ModelConfig& config) {
  // The special tokens the model came with (import --hf), or explicitly none: transformers
  // would otherwise assume its own defaults (GPT-2's 50256, LLaMA's 1 and 2).
  const FamilyRow& row = with_format(config);
  nlohmann::json hf = row.to_hf(config);
  hf["architectures"] = nlohmann::json::array({row.hf_architecture});
  hf["model_type"] = row.hf_model_type;
  auto token = [](int64_t id) { return id >= 0 ? nlohmann::json(id) : nlohmann::json(nullptr); };
  hf["bos_token_id"] = token(config.bos_token_id);
  hf["eos_token_id"] = config.eos_token_ids.empty() ? token(config.eos_token_id)
                                                    : nlohmann::json(config.eos_token_ids);
  if (config.pad_token_id >= 0) hf["pad_token_id"] = config.pad_token_id;
  return hf;
}

std::vector<HfTensor> hf_tensors(const ModelConfig& config) {
  return with_format(config).tensors(config);
}

bool hf_buffer(const std::string& hf_name) {
  auto ends_with = [&](const std::string& tail) {
    return hf_name.size() >= tail.size() &&
           hf_name.compare(hf_name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") ||
         ends_with(".rotary_emb.inv_freq");
}

}  // namespace pipetrain::models
