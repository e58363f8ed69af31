// A new family of the LLaMA decoder is one row and nothing else: a test family (Qwen2's q/k/v
// biases with Qwen3's q/k norms, under a transformers class of its own) registered here the
// way src/models/<family>/family.cpp defines a built-in one, then read from a config, written
// to and read back from transformers' config.json, named tensor by tensor, costed, divided and
// trained.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "models/hugging_face.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/models/llama/decoder_family.h"
#include "pipetrain/module/pipeline_module.h"
#include "planner/layer_cost.h"

namespace pipetrain::models {
namespace {

// read_rope and the rest of the decoder's shared readers are internal to src/models/llama/;
// a program's family reads what its class adds.
const FamilyRow* test_family() {
  static const FamilyRow* row = [] {
    register_family(decoder_family({
        .name = "biased_normed",
        .hf_architecture = "BiasedNormedForCausalLM",
        .hf_model_type = "biased_normed",
        .preset =
            [](const LlamaConfig&, LlamaConfig& decoder) {
              decoder.qkv_bias = true;
              decoder.qk_norm = true;
            },
        .from_hf =
            [](const HfFields& f, const nlohmann::json&, ModelConfig& config) {
              config.llama.rope_theta = f.number("rope_theta", 10000.0);
            },
    }));
    return family("biased_normed");
  }();
  return row;
}

const nlohmann::json kConfig = {{"model",
                                 {{"type", "biased_normed"},
                                  {"vocab_size", 40},
                                  {"context", 8},
                                  {"d_model", 16},
                                  {"heads", 4},
                                  {"num_key_value_heads", 2},
                                  {"intermediate_size", 24},
                                  {"layers", 2},
                                  {"max_position_embeddings", 8},
                                  {"rope_theta", 500.0}}}};

ModelConfig test_config() {
  test_family();
  return parse_model_config(kConfig);
}

TEST(FamilyRow, ATestFamilyReadsTheDecodersKeysWithItsPreset) {
  const FamilyRow* row = test_family();
  std::vector<std::string> unknown;
  const ModelConfig config = parse_model_config(kConfig, &unknown);
  ASSERT_EQ(config.type, row);
  EXPECT_TRUE(unknown.empty());
  EXPECT_TRUE(llama_family(config));
  EXPECT_FALSE(routes_experts(config));
  const LlamaConfig decoder = decoder_config(config);
  EXPECT_TRUE(decoder.qkv_bias);
  EXPECT_TRUE(decoder.qk_norm);
  EXPECT_FALSE(decoder.sandwich_norms);
  EXPECT_EQ(decoder.rope_theta, 500.0);
  // The experts' keys are not its keys: unknown there, as for any dense family.
  nlohmann::json with_experts = kConfig;
  with_experts["model"]["experts"] = 4;
  unknown.clear();
  parse_model_config(with_experts, &unknown);
  EXPECT_EQ(unknown, std::vector<std::string>{"model.experts"});
  // Its name is listed where model.type's choices are.
  nlohmann::json wrong = kConfig;
  wrong["model"]["type"] = "biased";
  try {
    parse_model_config(wrong);
    ADD_FAILURE() << "no InputError";
  } catch (const io::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"biased_normed\""), std::string::npos) << e.what();
  }
}

TEST(FamilyRow, ATestFamilyRoundTripsThroughTransformersConfig) {
  const ModelConfig config = test_config();
  const nlohmann::json hf = hf_config_of(config);
  EXPECT_EQ(hf["architectures"], nlohmann::json::array({"BiasedNormedForCausalLM"}));
  EXPECT_EQ(hf["model_type"], "biased_normed");
  const ModelConfig back = model_config_from_hf(hf, "config.json");
  EXPECT_EQ(back.type, test_family());
  EXPECT_EQ(model_keys().write(back), model_keys().write(config));
}

TEST(FamilyRow, ATestFamilysTensorsCostsAndDivisionsFollowItsBuild) {
  const ModelConfig config = test_config();
  const BuiltinModel built = make_builtin_model(config);
  std::set<std::string> built_names, mapped;
  for (std::size_t i = 0; i < built.layers.size(); ++i) {
    if (built.layers[i].tied()) continue;
    const module::Layer layer = built.layers[i].build();
    if (!layer.module) continue;
    for (const auto& p : layer.module->named_parameters())
      built_names.insert("layers." + std::to_string(i) + "." + p.key());
  }
  std::set<std::string> hf_names;
  for (const HfTensor& t : hf_tensors(config)) {
    mapped.insert(t.name);
    hf_names.insert(t.hf_name);
  }
  EXPECT_EQ(mapped, built_names);
  EXPECT_TRUE(hf_names.contains("model.layers.1.self_attn.q_proj.bias"));
  EXPECT_TRUE(hf_names.contains("model.layers.1.self_attn.k_norm.weight"));

  const std::vector<LayerCost> costs = planner::layer_costs(config);
  ASSERT_EQ(costs.size(), built.layers.size());
  for (std::size_t i = 0; i < costs.size(); ++i) {
    EXPECT_EQ(costs[i].type, built.layers[i].type) << i;
    EXPECT_EQ(costs[i].parameters, built.layers[i].count_parameters()) << i;
  }
  const Capabilities can = capabilities(config);
  EXPECT_TRUE(can.tensor_parallel && can.context_parallel && can.sequence_parallel);
  EXPECT_TRUE(config.type->divides(config, 2));
  EXPECT_FALSE(config.type->divides(config, 4));  // two key/value heads
}

TEST(FamilyRow, ATestFamilyTrains) {
  const BuiltinModel built = make_builtin_model(test_config());
  module::PipelineModule model(built.layers, built.loss, {.seed = 5});
  at::manual_seed(1);
  const at::Tensor tokens = at::randint(40, {2, 9}, at::kLong);
  const module::Activation inputs{tokens.slice(1, 0, 8)};
  const at::Tensor loss = built.loss(model.forward(inputs), {tokens.slice(1, 1, 9)});
  ASSERT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_NEAR(loss.item<double>(), std::log(40.0), 1.0);  // near uniform at the start
  loss.backward();
  int biases = 0;
  for (const auto& [name, parameter] : model.named_parameters()) {
    ASSERT_TRUE(parameter.grad().defined()) << name;
    if (name.find("q_proj.bias") != std::string::npos) {
      ++biases;
      EXPECT_GT(parameter.grad().abs().sum().item<double>(), 0) << name;
    }
  }
  EXPECT_EQ(biases, 2);
}

}  // namespace
}  // namespace pipetrain::models
