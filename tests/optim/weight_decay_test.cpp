#include "optim/weight_decay.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "optim/replicated_masters.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::engine {
namespace {

TEST(WeightDecayRule, AutoExemptsBiasesNormsAndWhatTheModelLists) {
  const optim::WeightDecayRule rule({"auto"});
  EXPECT_TRUE(rule.decays("GptBlock", "qkv.weight", 2, false));
  EXPECT_FALSE(rule.decays("GptBlock", "qkv.bias", 1, false));
  EXPECT_FALSE(rule.decays("LayerNorm", "weight", 1, false));
  EXPECT_FALSE(rule.decays("GptEmbedding", "tokens.weight", 2, /*model_exempt=*/true));
}

TEST(WeightDecayRule, PatternsSearchTypeDotName) {
  const optim::WeightDecayRule rule({"bias$", "^GptEmbedding\\."});
  EXPECT_FALSE(rule.decays("GptBlock", "qkv.bias", 1, false));
  EXPECT_FALSE(rule.decays("GptEmbedding", "positions.weight", 2, true));
  EXPECT_TRUE(rule.decays("LayerNorm", "weight", 1, false));  // only the patterns count
  EXPECT_TRUE(optim::WeightDecayRule({}).decays("GptBlock", "qkv.bias", 1, true));
  EXPECT_THROW(optim::WeightDecayRule({"(unclosed"}), io::InputError);
  EXPECT_THROW(optim::WeightDecayRule({std::string(300, 'a')}), io::InputError);
}

// Decay alone (a zero gradient): exempt parameters keep their values, decayed ones shrink by
// lr * rate (AdamW) or get rate * value added to their gradient (Adam, SGD).
TEST(WeightDecay, MovesOnlyTheDecayedParameters) {
  const at::Tensor matrix = torch::full({2, 3}, 2.0), bias = torch::full({3}, 2.0);
  for (const at::Tensor& p : {matrix, bias}) p.mutable_grad() = torch::zeros_like(p);
  optim::ReplicatedMasters masters({matrix, bias}, {matrix, bias}, {true, false}, nullptr);
  masters.apply_weight_decay({.rate = 0.1, .decoupled = true}, /*lr=*/0.5);
  EXPECT_TRUE(matrix.equal(torch::full({2, 3}, 2.0 * (1 - 0.05))));
  EXPECT_TRUE(bias.equal(torch::full({3}, 2.0)));
  masters.apply_weight_decay({.rate = 0.1, .decoupled = false}, 0.5);
  EXPECT_TRUE(matrix.grad().allclose(0.1 * matrix));
  EXPECT_TRUE(bias.grad().equal(torch::zeros({3})));
}

TEST(WeightDecay, AMaskLimitsItToSomeElements) {
  at::Tensor flat = torch::full({4}, 1.0);
  flat.mutable_grad() = torch::zeros({4});
  optim::apply_weight_decay({.rate = 0.5, .decoupled = true}, flat, 1.0,
                            torch::tensor({1.0, 0.0, 1.0, 0.0}));
  EXPECT_TRUE(flat.equal(torch::tensor({0.5, 1.0, 0.5, 1.0})));
}

}  // namespace
}  // namespace pipetrain::engine
