#include "pipetrain/module/lora_config.h"

#include <algorithm>

#include "pipetrain/config/json_value.h"

namespace pipetrain::module {
namespace {

std::vector<std::string> read_targets(const std::string& key, const nlohmann::json& value) {
  std::vector<std::string> names = config::read_strings(key, value);
  if (names.empty()) config::throw_input_error(key + " is empty: name at least one linear");
  for (const auto& name : names) {
    const auto& known = lora_targets();
    if (std::find(known.begin(), known.end(), name) == known.end())
      config::throw_input_error(key + ": \"" + name + "\" is not a linear LoRA adapts (" +
                                config::spell_choices(known, config::Quoting::kQuoted) + ")");
    if (std::count(names.begin(), names.end(), name) > 1)
      config::throw_input_error(key + ": \"" + name + "\" is named twice");
  }
  return names;
}

std::vector<int64_t> read_layers(const std::string& key, const nlohmann::json& value) {
  if (!value.is_array()) config::throw_input_error(key + " must be a list of block indices");
  std::vector<int64_t> layers;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    layers.push_back(config::read_integer(item, value[i], config::at_least(0)));
    if (std::count(layers.begin(), layers.end(), layers.back()) > 1)
      config::throw_input_error(item + ": block " + std::to_string(layers.back()) +
                                " is named twice");
  }
  return layers;
}

// The last part of a module's dotted path: "self_attn.q_proj" -> "q_proj".
std::string_view leaf(std::string_view path) {
  const auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

}  // namespace

const config::KeyTable<LoraConfig>& lora_keys() {
  static const config::KeyTable<LoraConfig> table = [] {
    config::KeyTable<LoraConfig> t;
    t.integer("lora.rank", PIPETRAIN_FIELD(rank),
              "LoRA adapters of this rank (peft's `r`) on the linears of `lora.target_modules`: "
              "every other parameter is frozen (no gradient, no optimizer state, no ZeRO "
              "shard); 0: no adapters, every parameter trained; at most 65536",
              config::Range{.min = 0, .max = 65536})
        .number("lora.alpha", PIPETRAIN_FIELD(alpha),
                "peft's `lora_alpha`: the update B A is scaled by alpha / rank", config::above(0))
        .number("lora.dropout", PIPETRAIN_FIELD(dropout),
                "peft's `lora_dropout`: dropout on the adapters' input only",
                config::Range{.min = 0, .max = 1, .exclusive_max = true})
        .custom(
            "lora.target_modules", "list",
            "the linears adapted, by transformers' names: `q_proj`, `k_proj`, `v_proj`, "
            "`o_proj`, `gate_proj`, `up_proj`, `down_proj` (LLaMA-family models; a "
            "mixture of experts' expert MLPs are not adapted)",
            [](const std::string& key, const nlohmann::json& v, LoraConfig& c) {
              c.target_modules = read_targets(key, v);
            },
            [](const LoraConfig& c) { return nlohmann::json(c.target_modules); })
        .custom(
            "lora.layers", "list",
            "the decoder blocks adapted (transformers' `layers.N`, peft's "
            "`layers_to_transform`); empty: every block",
            [](const std::string& key, const nlohmann::json& v, LoraConfig& c) {
              c.layers = read_layers(key, v);
            },
            [](const LoraConfig& c) { return nlohmann::json(c.layers); });
    return t;
  }();
  return table;
}

void check_adapted(const LoraConfig& lora, const std::string& model, double adapted,
                   int64_t blocks) {
  if (!lora.enabled()) return;
  for (const int64_t layer : lora.layers) {
    if (layer >= blocks)
      config::throw_input_error("lora.layers: " + std::to_string(layer) +
                                " is not a block of this " + model + " (it has " +
                                std::to_string(blocks) + ")");
  }
  if (adapted > 0) return;
  std::string targets;
  for (const auto& name : lora.target_modules) targets += (targets.empty() ? "" : ", ") + name;
  config::throw_input_error("lora.target_modules: no linear of this " + model + " is named " +
                            targets +
                            " (LoRA adapts LLaMA-family models' attention and MLP projections)");
}

const std::vector<std::string>& lora_targets() {
  static const std::vector<std::string> names{"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};
  return names;
}

bool is_adapter(std::string_view name) {
  const std::string_view last = leaf(name);
  return last == "lora_A" || last == "lora_B";
}

bool LoraConfig::adapts_block(int64_t block) const {
  return block >= 0 && (layers.empty() || std::count(layers.begin(), layers.end(), block) > 0);
}

bool LoraConfig::targets(std::string_view linear) const {
  return std::find(target_modules.begin(), target_modules.end(), linear) != target_modules.end();
}

}  // namespace pipetrain::module
