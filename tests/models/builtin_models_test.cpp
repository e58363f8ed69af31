// The built-in models describe themselves truly: each layer's parameter count (used to
// partition without building) equals what its module holds, and transformers' name map
// covers every parameter of the GPT and the LLaMA exactly once; the planner's costs list
// the same layers.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "data/tokenizer.h"
#include "models/hugging_face.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "planner/layer_cost.h"

namespace pipetrain::models {
namespace {

std::vector<ModelConfig> configs() {
  std::vector<ModelConfig> all;
  for (bool tied : {true, false}) {
    ModelConfig gpt;
    gpt.gpt = {.vocab_size = 50, .context = 9, .d_model = 12, .heads = 3, .layers = 2};
    gpt.gpt.tie_embeddings = tied;
    all.push_back(gpt);
    ModelConfig llama;
    llama.type = models::family("llama");
    llama.llama = {.vocab_size = 50,
                   .context = 9,
                   .d_model = 16,
                   .heads = 4,
                   .num_key_value_heads = 2,
                   .intermediate_size = 24,
                   .layers = 3,
                   .tie_embeddings = tied,
                   .max_position_embeddings = 9};
    all.push_back(llama);
    ModelConfig mixtral = llama;
    mixtral.type = models::family("mixtral");
    mixtral.moe = {.experts = 3, .experts_per_token = 2};
    mixtral.llama.sliding_window = 4;
    all.push_back(mixtral);
    // Each family's own parts: Qwen2's biases and windows past block 1 (YaRN), Qwen3's q/k
    // norms and wider heads (LLaMA 3.1's rotation), Mistral's windows (linear scaling).
    ModelConfig qwen2 = llama;
    qwen2.type = models::family("qwen2");
    qwen2.llama.sliding_window = 4;
    qwen2.llama.max_window_layers = 1;
    qwen2.llama.rope_scaling = {
        .type = RopeType::kYarn, .factor = 3.0, .original_max_position_embeddings = 3};
    all.push_back(qwen2);
    ModelConfig qwen3 = llama;
    qwen3.type = models::family("qwen3");
    qwen3.llama.head_dim = 8;
    qwen3.llama.rope_scaling = {.type = RopeType::kLlama3,
                                .factor = 8.0,
                                .low_freq_factor = 1.0,
                                .high_freq_factor = 4.0,
                                .original_max_position_embeddings = 4};
    all.push_back(qwen3);
    ModelConfig qwen3_moe = qwen3;
    qwen3_moe.type = models::family("qwen3_moe");
    qwen3_moe.moe = {.experts = 3, .experts_per_token = 2};
    qwen3_moe.moe.norm_topk_prob = false;
    qwen3_moe.moe.moe_intermediate_size = 12;
    qwen3_moe.moe.mlp_only_layers = {1};
    all.push_back(qwen3_moe);
    ModelConfig mistral = llama;
    mistral.type = models::family("mistral");
    mistral.llama.sliding_window = 4;
    mistral.llama.rope_scaling = {.type = RopeType::kLinear, .factor = 2.0};
    all.push_back(mistral);
  }
  ModelConfig mlp;
  mlp.type = models::family("mlp");
  all.push_back(mlp);
  return all;
}

// "layers.<i>.<name>" of every parameter, a tied module's under its first layer only.
std::set<std::string> parameter_names(const BuiltinModel& model) {
  std::set<std::string> names, tie_keys;
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const module::LayerSpec& spec = model.layers[i];
    if (spec.tied() && !tie_keys.insert(spec.tie_key).second) continue;
    const module::Layer layer = spec.build();
    if (!layer.module) continue;
    for (const auto& p : layer.module->named_parameters())
      names.insert("layers." + std::to_string(i) + "." + p.key());
  }
  return names;
}

TEST(BuiltinModels, ParameterCountsEqualTheBuiltModules) {
  for (const ModelConfig& config : configs()) {
    const BuiltinModel model = make_builtin_model(config);
    for (std::size_t i = 0; i < model.layers.size(); ++i) {
      const module::LayerSpec& spec = model.layers[i];
      if (!spec.count_parameters) continue;
      const module::Layer layer = spec.build();
      int64_t built = 0;
      if (layer.module)
        for (const auto& p : layer.module->parameters()) built += p.numel();
      EXPECT_EQ(spec.count_parameters(), built)
          << config.type->name << " layer " << i << " " << spec.type;
    }
  }
}

// The planner costs the layers the models build: same order, types, ties and counts.
TEST(BuiltinModels, PlannerCostsDescribeTheSameLayers) {
  for (const ModelConfig& config : configs()) {
    if (config.type == models::family("mlp")) continue;
    const BuiltinModel model = make_builtin_model(config);
    const auto costs = planner::layer_costs(config);
    ASSERT_EQ(costs.size(), model.layers.size()) << config.type->name;
    for (std::size_t i = 0; i < costs.size(); ++i) {
      const module::LayerSpec& spec = model.layers[i];
      EXPECT_EQ(costs[i].type, spec.type) << config.type->name << " layer " << i;
      EXPECT_EQ(costs[i].tie_key, spec.tie_key) << config.type->name << " layer " << i;
      EXPECT_EQ(costs[i].parameters, spec.count_parameters())
          << config.type->name << " layer " << i;
    }
  }
}

TEST(BuiltinModels, TransformersNamesCoverEveryParameterOnce) {
  for (const ModelConfig& config : configs()) {
    if (config.type == models::family("mlp")) {
      EXPECT_THROW(hf_tensors(config), io::InputError);
      continue;
    }
    std::set<std::string> mapped, parts, hf;
    for (const HfTensor& t : hf_tensors(config)) {
      mapped.insert(t.name);
      const std::string part =
          t.name + (t.expert >= 0 ? " expert " + std::to_string(t.expert) : "");
      EXPECT_TRUE(parts.insert(part).second) << part << " mapped twice";
      EXPECT_TRUE(hf.insert(t.hf_name).second) << t.hf_name << " used twice";
      if (t.expert >= 0) {
        EXPECT_LT(t.expert, config.moe.experts) << t.hf_name;
      }
    }
    EXPECT_EQ(mapped, parameter_names(make_builtin_model(config))) << config.type->name;
    if (models::routes_experts(config)) {  // each stacked tensor in one part per expert
      int64_t routed = 0;
      for (int64_t i = 0; i < config.llama.layers; ++i) routed += config.moe.routes(i);
      EXPECT_EQ(parts.size(), mapped.size() + 3 * routed * (config.moe.experts - 1));
    }
  }
}

// A Mixtral transformers cannot compute has no transformers format.
TEST(BuiltinModels, MixtralsTransformersCannotComputeAreNotExported) {
  ModelConfig config;
  config.type = models::family("mixtral");
  config.moe.score = RouterScore::kSigmoid;
  EXPECT_THROW(hf_config_of(config), io::InputError);
  EXPECT_THROW(hf_tensors(config), io::InputError);
  config.moe.score = RouterScore::kSoftmax;
  config.moe.shared_experts = 1;
  EXPECT_THROW(hf_config_of(config), io::InputError);
  config.moe.shared_experts = 0;
  EXPECT_NO_THROW(hf_config_of(config));
}

// What transformers cannot say is refused on export, not written wrong: windows in a LLaMA,
// and Mistral windows that start past the first block.
TEST(BuiltinModels, WindowsTransformersCannotSayAreNotExported) {
  ModelConfig config = configs()[1];  // a LLaMA
  ASSERT_EQ(config.type, models::family("llama"));
  config.llama.sliding_window = 4;
  EXPECT_THROW(hf_config_of(config), io::InputError);
  config.type = models::family("mistral");
  EXPECT_NO_THROW(hf_config_of(config));
  config.llama.max_window_layers = 1;
  EXPECT_THROW(hf_config_of(config), io::InputError);
  config.type = models::family("qwen2");
  EXPECT_NO_THROW(hf_config_of(config));
}

TEST(BuiltinModels, TransformersConfigRoundTrips) {
  for (const ModelConfig& config : configs()) {
    if (config.type == models::family("mlp")) continue;
    const ModelConfig back = model_config_from_hf(hf_config_of(config), "config.json");
    EXPECT_EQ(model_keys().write(back), model_keys().write(config)) << config.type->name;
  }
}

TEST(Tokenizers, BytesRoundTripAndCheckTheVocabulary) {
  const auto bytes = data::make_tokenizer("", 256);
  EXPECT_EQ(bytes->encode("Hi\n"), (std::vector<int64_t>{72, 105, 10}));
  EXPECT_EQ(bytes->decode({72, 105, 10, 200, 300}), "Hi\n??");
  EXPECT_THROW(data::make_tokenizer("", 100), io::InputError);  // bytes need 256 ids
  EXPECT_THROW(data::make_tokenizer("tokenizer.json", 1000), io::InputError);
  EXPECT_THROW(data::make_tokenizer("no-such.model", 1000), io::InputError);
}

}  // namespace
}  // namespace pipetrain::models
