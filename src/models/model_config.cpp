#include "pipetrain/models/model_config.h"

#include <stdexcept>
#include <string>

#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

// model.type: the row of a family, built in or registered; the families' names else.
void read_type(const std::string& key, const nlohmann::json& value, ModelConfig& config) {
  if (value.is_string()) {
    if (const FamilyRow* row = find_family(value.get<std::string>())) {
      config.type = row;
      return;
    }
  }
  throw io::InputError(key + " must be " + family_list([](const FamilyRow&) { return true; }) +
                       ", got " + value.dump());
}

// The families `keep` accepts, as the key table's docs name them: "gemma3, llama or qwen3".
std::string names_of(const std::function<bool(const FamilyRow&)>& keep) {
  std::vector<std::string> names;
  for (const FamilyRow* row : families()) {
    if (keep(*row)) names.push_back(row->name);
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return list;
}

// Keys after it hold for the families `keep` accepts.
void when_families(config::KeyTable<ModelConfig>& t,
                   const std::function<bool(const FamilyRow&)>& keep) {
  t.when([keep](const ModelConfig& c) { return keep(*c.type); }, "model.type " + names_of(keep));
}

}  // namespace

const config::Range& block_count_range() {
  // 16384 blocks is far past any trained model, and keeps work sized by the layer count
  // bounded (the planner balances stages in layers² steps).
  static const config::Range range = config::within(1, 16384);
  return range;
}

const config::Names<RopeType>& rope_type_names() {
  static const config::Names<RopeType> names{{"default", RopeType::kDefault},
                                             {"linear", RopeType::kLinear},
                                             {"dynamic", RopeType::kDynamic},
                                             {"llama3", RopeType::kLlama3},
                                             {"yarn", RopeType::kYarn}};
  return names;
}

Capabilities capabilities(const ModelConfig& config) {
  return config.type->capabilities ? config.type->capabilities(config) : Capabilities{};
}

int64_t context_of(const ModelConfig& config) {
  switch (config.type->body) {
    case Body::kGpt:
      return config.gpt.context;
    case Body::kDecoder:
      return config.llama.context;
    case Body::kMlp:
    case Body::kProgram:
      break;
  }
  return 0;
}

LlamaConfig decoder_config(const ModelConfig& config) {
  LlamaConfig decoder = config.llama;
  decoder.qkv_bias = decoder.qk_norm = decoder.unit_offset_norms = decoder.sandwich_norms =
      decoder.scaled_embeddings = decoder.gelu_mlp = false;
  decoder.sliding_window_pattern = 0;
  if (config.type->preset) config.type->preset(config.llama, decoder);
  return decoder;
}

bool ties_embeddings(const ModelConfig& config) {
  if (llama_family(config)) return config.llama.tie_embeddings;
  return config.type->body == Body::kGpt && config.gpt.tie_embeddings;
}

const config::KeyTable<ModelConfig>& model_keys() {
  static const config::KeyTable<ModelConfig> table = [] {
    config::KeyTable<ModelConfig> t;
    std::string types = "one of";
    for (const FamilyRow* row : families()) types += " `" + row->name + "`";
    t.custom("model.type", types + ", or a family the program registered",
             "the model: a built-in one, or one a program built on pipetrain registered "
             "(`models::register_family`, [cpp-api.md](cpp-api.md#a-model-family-of-your-own))",
             read_type, [](const ModelConfig& c) { return nlohmann::json(type_name(c)); });
    t.when([](const ModelConfig& c) { return c.type->body == Body::kProgram; },
           "model.type a registered family")
        .object("model.params", PIPETRAIN_FIELD(params),
                "a registered family's settings, read by the family");
    when_families(t, [](const FamilyRow& row) { return row.body == Body::kDecoder; });
    t.integer("model.vocab_size", PIPETRAIN_FIELD(llama.vocab_size), "tokens")
        .integer("model.context", PIPETRAIN_FIELD(llama.context),
                 "the sequence trained on, at most `max_position_embeddings`")
        .integer("model.max_position_embeddings", PIPETRAIN_FIELD(llama.max_position_embeddings),
                 "the longest sequence the rotation was trained for; 0: `context`",
                 config::at_least(0))
        .integer("model.d_model", PIPETRAIN_FIELD(llama.d_model), "width, divisible by `heads`")
        .integer("model.heads", PIPETRAIN_FIELD(llama.heads), "query heads")
        .integer("model.num_key_value_heads", PIPETRAIN_FIELD(llama.num_key_value_heads),
                 "key/value heads, dividing `heads` (grouped-query attention)")
        .integer("model.head_dim", PIPETRAIN_FIELD(llama.head_dim),
                 "each head's width (even); 0: `d_model / heads`", config::at_least(0))
        .integer("model.intermediate_size", PIPETRAIN_FIELD(llama.intermediate_size),
                 "the SwiGLU MLP's width")
        .integer("model.layers", PIPETRAIN_FIELD(llama.layers), "decoder blocks",
                 block_count_range())
        .number("model.rope_theta", PIPETRAIN_FIELD(llama.rope_theta), "rotary embeddings' base")
        .choice("model.rope_scaling.rope_type", PIPETRAIN_FIELD(llama.rope_scaling.type),
                rope_type_names(),
                "the rotation's frequencies, as transformers' rope_type computes them")
        .number("model.rope_scaling.factor", PIPETRAIN_FIELD(llama.rope_scaling.factor),
                "linear, dynamic, llama3, yarn: the context's growth over the pretraining one")
        .number("model.rope_scaling.low_freq_factor",
                PIPETRAIN_FIELD(llama.rope_scaling.low_freq_factor), "llama3")
        .number("model.rope_scaling.high_freq_factor",
                PIPETRAIN_FIELD(llama.rope_scaling.high_freq_factor), "llama3")
        .integer("model.rope_scaling.original_max_position_embeddings",
                 PIPETRAIN_FIELD(llama.rope_scaling.original_max_position_embeddings),
                 "llama3, yarn: the pretraining context", config::at_least(0))
        .number("model.rope_scaling.beta_fast", PIPETRAIN_FIELD(llama.rope_scaling.beta_fast),
                "yarn")
        .number("model.rope_scaling.beta_slow", PIPETRAIN_FIELD(llama.rope_scaling.beta_slow),
                "yarn")
        .number("model.rope_scaling.attention_factor",
                PIPETRAIN_FIELD(llama.rope_scaling.attention_factor),
                "yarn: cos and sin scaled by it; 0: 0.1 ln(factor) + 1")
        .flag("model.rope_scaling.truncate", PIPETRAIN_FIELD(llama.rope_scaling.truncate),
              "yarn: the ramp's bounds rounded outwards")
        .number("model.rms_norm_eps", PIPETRAIN_FIELD(llama.rms_norm_eps),
                "added to the RMSNorm's mean square")
        .integer("model.sliding_window", PIPETRAIN_FIELD(llama.sliding_window),
                 "each position attends to this many last positions (itself included); 0: all",
                 config::at_least(0))
        .integer("model.max_window_layers", PIPETRAIN_FIELD(llama.max_window_layers),
                 "blocks before this one attend to all positions, the rest within "
                 "`sliding_window` (Qwen's rule; Mistral: 0)",
                 config::at_least(0))
        .flag("model.tie_embeddings", PIPETRAIN_FIELD(llama.tie_embeddings),
              "the LM head uses the token embedding");
    when_families(t, [](const FamilyRow& row) { return row.routes_experts; });
    t.integer("model.experts", PIPETRAIN_FIELD(moe.experts),
              "experts in each MoE layer (num_local_experts)", config::at_least(1))
        .integer("model.experts_per_token", PIPETRAIN_FIELD(moe.experts_per_token),
                 "experts computing each token: the router's top k (num_experts_per_tok)",
                 config::at_least(1))
        .choice("model.router_score", PIPETRAIN_FIELD(moe.score),
                config::Names<RouterScore>{{"softmax", RouterScore::kSoftmax},
                                           {"sigmoid", RouterScore::kSigmoid}},
                "the router's scores: softmax over the experts (Mixtral) or a sigmoid each "
                "(DeepSeek-V3)")
        .integer("model.shared_experts", PIPETRAIN_FIELD(moe.shared_experts),
                 "experts every token passes through besides the routed ones (DeepSeek-V3)",
                 config::at_least(0))
        .number("model.router_aux_loss_coef", PIPETRAIN_FIELD(moe.router_aux_loss_coef),
                "weight of the load-balancing loss (1 when the experts are used evenly)")
        .number("model.router_z_loss_coef", PIPETRAIN_FIELD(moe.router_z_loss_coef),
                "weight of the router z-loss")
        .number("model.capacity_factor", PIPETRAIN_FIELD(moe.capacity_factor),
                "0: dropless; else an expert takes at most capacity_factor x its even share of "
                "a sequence's tokens, the rest dropped")
        .flag("model.norm_topk_prob", PIPETRAIN_FIELD(moe.norm_topk_prob),
              "the chosen experts' scores renormalised to sum to 1 (Qwen3-MoE: false)")
        .integer("model.moe_intermediate_size", PIPETRAIN_FIELD(moe.moe_intermediate_size),
                 "each expert's MLP width; 0: `intermediate_size`", config::at_least(0))
        .integer("model.decoder_sparse_step", PIPETRAIN_FIELD(moe.decoder_sparse_step),
                 "block i routes where i + 1 is a multiple of it (and i is not in "
                 "`mlp_only_layers`); the rest have a dense MLP of `intermediate_size`",
                 config::at_least(1))
        .custom(
            "model.mlp_only_layers", "list of int", "blocks (0-based) with a dense MLP",
            [](const std::string& key, const nlohmann::json& v, ModelConfig& c) {
              if (!v.is_array()) throw io::InputError(key + " must be a list of block numbers");
              c.moe.mlp_only_layers.clear();
              for (const auto& layer : v) {
                if (!layer.is_number_integer() || layer.get<int64_t>() < 0)
                  throw io::InputError(key + " must be a list of block numbers (0 or more)");
                c.moe.mlp_only_layers.push_back(layer.get<int64_t>());
              }
            },
            [](const ModelConfig& c) { return nlohmann::json(c.moe.mlp_only_layers); });
    when_families(t, [](const FamilyRow& row) {
      return row.body == Body::kDecoder || row.body == Body::kGpt;
    });
    t.integer("model.bos_token_id", PIPETRAIN_FIELD(bos_token_id),
              "the begin-of-sequence token (transformers' name); -1: none", config::at_least(-1))
        .integer("model.eos_token_id", PIPETRAIN_FIELD(eos_token_id),
                 "the end-of-sequence token (transformers' name); -1: none", config::at_least(-1))
        .integer("model.pad_token_id", PIPETRAIN_FIELD(pad_token_id),
                 "the padding token (transformers' name); -1: none", config::at_least(-1))
        .custom(
            "model.eos_token_ids", "list of int",
            "every end-of-sequence token where transformers' config.json lists several (the "
            "first is eos_token_id); empty: eos_token_id alone",
            [](const std::string& key, const nlohmann::json& v, ModelConfig& c) {
              c.eos_token_ids.clear();
              if (!v.is_array()) throw io::InputError(key + " must be a list of token ids");
              for (const auto& id : v) {
                if (!id.is_number_integer() || id.get<int64_t>() < 0)
                  throw io::InputError(key + " must be a list of token ids (0 or more)");
                c.eos_token_ids.push_back(id.get<int64_t>());
              }
            },
            [](const ModelConfig& c) { return nlohmann::json(c.eos_token_ids); });
    // Each family's own keys (the GPT's and the MLP's sizes, Gemma's settings).
    for (const FamilyRow* row : families()) {
      if (!row->keys) continue;
      t.when([row](const ModelConfig& c) { return c.type == row; }, "model.type " + row->name);
      row->keys(t);
    }
    return t;
  }();
  return table;
}

ModelConfig parse_model_config(const nlohmann::json& config, std::vector<std::string>* unknown) {
  ModelConfig model;
  std::vector<std::string> all_unknown = model_keys().read(config, model);
  if (unknown) {
    for (const auto& key : all_unknown) {
      if (key.rfind("model.", 0) == 0) unknown->push_back(key);
    }
  }
  return model;
}

}  // namespace pipetrain::models
