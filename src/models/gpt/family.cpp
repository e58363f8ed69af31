#include <cmath>

#include "models/layer_cost_parts.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/models/hf_format.h"
#include "pipetrain/models/model_config.h"

// The GPT (GPT-2's architecture) as a family row.
namespace pipetrain::models {
namespace {

constexpr double kGptLayerNormEps = 1e-5;  // the GPT's LayerNorms (torch's default)

GptConfig gpt2_from_hf(const HfFields& f) {
  GptConfig g;
  g.vocab_size = f.integer("vocab_size");
  g.context = f.integer("n_positions");
  g.d_model = f.integer("n_embd");
  g.heads = f.integer("n_head");
  g.layers = f.integer("n_layer");
  g.dropout = f.number("resid_pdrop", 0.1);
  g.tie_embeddings = f.flag("tie_word_embeddings", true);
  const std::string activation = f.text("activation_function", "gelu_new");
  if (activation == "gelu_new" || activation == "gelu_pytorch_tanh") {
    g.gelu = Gelu::kTanh;
  } else if (activation == "gelu") {
    g.gelu = Gelu::kExact;
  } else {
    f.refuse("activation_function", "\"" + activation +
                                        "\" is not one pipetrain computes (gelu, "
                                        "gelu_new, gelu_pytorch_tanh)");
  }
  if (f.integer("n_inner", 4 * g.d_model) != 4 * g.d_model)
    f.refuse("n_inner", "must be 4 * n_embd (the GPT's MLP width)");
  if (f.number("layer_norm_epsilon", kGptLayerNormEps) != kGptLayerNormEps)
    f.refuse("layer_norm_epsilon", "must be 1e-05 (the GPT's LayerNorm)");
  if (!f.flag("scale_attn_weights", true))
    f.refuse("scale_attn_weights", "must be true (attention is scaled by 1/sqrt(head size))");
  if (f.flag("scale_attn_by_inverse_layer_idx", false))
    f.refuse("scale_attn_by_inverse_layer_idx", "is not supported");
  return g;
}

std::vector<HfTensor> gpt2_tensors(const GptConfig& g) {
  std::vector<HfTensor> t;
  add_tensor(t, "transformer.wte.weight", 0, "tokens.weight");
  add_tensor(t, "transformer.wpe.weight", 0, "positions.weight");
  const std::pair<const char*, const char*> norms[] = {{"ln_1", "attention_norm"},
                                                       {"ln_2", "mlp_norm"}};
  const std::pair<const char*, const char*> linears[] = {{"attn.c_attn", "qkv"},
                                                         {"attn.c_proj", "projection"},
                                                         {"mlp.c_fc", "expand"},
                                                         {"mlp.c_proj", "contract"}};
  for (int i = 0; i < g.layers; ++i) {
    const std::string block = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [hf, ours] : norms) {
      add_tensor(t, block + hf + ".weight", i + 1, std::string(ours) + ".weight");
      add_tensor(t, block + hf + ".bias", i + 1, std::string(ours) + ".bias");
    }
    for (const auto& [hf, ours] : linears) {
      add_tensor(t, block + hf + ".weight", i + 1, std::string(ours) + ".weight",
                 /*transposed=*/true);
      add_tensor(t, block + hf + ".bias", i + 1, std::string(ours) + ".bias");
    }
  }
  const int final_norm = static_cast<int>(g.layers) + 1;
  add_tensor(t, "transformer.ln_f.weight", final_norm, "weight");
  add_tensor(t, "transformer.ln_f.bias", final_norm, "bias");
  if (!g.tie_embeddings) add_tensor(t, "lm_head.weight", final_norm + 1, "weight");
  return t;
}

nlohmann::json gpt2_config(const GptConfig& g) {
  return {{"vocab_size", g.vocab_size},
          {"n_positions", g.context},
          {"n_embd", g.d_model},
          {"n_head", g.heads},
          {"n_layer", g.layers},
          {"n_inner", nullptr},
          {"activation_function", g.gelu == Gelu::kTanh ? "gelu_new" : "gelu"},
          {"layer_norm_epsilon", kGptLayerNormEps},
          {"resid_pdrop", g.dropout},
          {"embd_pdrop", g.dropout},
          {"attn_pdrop", g.dropout},
          {"tie_word_embeddings", g.tie_embeddings},
          {"torch_dtype", "float32"}};
}

void bind_gpt_keys(config::KeyTable<ModelConfig>& t) {
  t.integer("model.vocab_size", PIPETRAIN_FIELD(gpt.vocab_size), "tokens")
      .integer("model.context", PIPETRAIN_FIELD(gpt.context), "longest sequence")
      .integer("model.d_model", PIPETRAIN_FIELD(gpt.d_model), "width, divisible by `heads`")
      .integer("model.heads", PIPETRAIN_FIELD(gpt.heads), "attention heads")
      .integer("model.layers", PIPETRAIN_FIELD(gpt.layers), "transformer blocks",
               block_count_range())
      .number("model.dropout", PIPETRAIN_FIELD(gpt.dropout), "dropout, in [0, 1)")
      .choice("model.activation", PIPETRAIN_FIELD(gpt.gelu),
              config::Names<Gelu>{{"gelu", Gelu::kExact}, {"gelu_tanh", Gelu::kTanh}},
              "the MLP's GELU: exact, or the tanh approximation (GPT-2)")
      .flag("model.tie_embeddings", PIPETRAIN_FIELD(gpt.tie_embeddings),
            "the LM head uses the token embedding");
}

}  // namespace

const FamilyRow* gpt_family_row() {
  static const FamilyRow row{
      .name = "gpt",
      .body = Body::kGpt,
      .hf_architecture = "GPT2LMHeadModel",
      .hf_model_type = "gpt2",
      .capabilities = [](const ModelConfig&) -> Capabilities {
        return {.tensor_parallel = true, .context_parallel = true, .sequence_parallel = true};
      },
      .divides = [](const ModelConfig& c,
                    int t) { return c.gpt.heads % t == 0 && c.gpt.vocab_size % t == 0; },
      .keys = bind_gpt_keys,
      .from_hf = [](const HfFields& f, const nlohmann::json&,
                    ModelConfig& config) { config.gpt = gpt2_from_hf(f); },
      .to_hf = [](const ModelConfig& config) { return gpt2_config(config.gpt); },
      .tensors = [](const ModelConfig& config) { return gpt2_tensors(config.gpt); },
      .costs = [](const ModelConfig& config) { return costs::gpt_costs(config.gpt); },
      .build =
          [](const ModelConfig& config, const ModelGroups& groups) {
            const GptConfig& g = config.gpt;
            return language_model(gpt_layers(g, groups.tensor, groups.context), groups,
                                  g.vocab_size, g.context);
          },
  };
  return &row;
}

}  // namespace pipetrain::models
