#include <gtest/gtest.h>

#include "pipetrain/io/errors.h"
#include "pipetrain/module/partition.h"

namespace pipetrain::module {
namespace {

LayerFacts facts(std::vector<int64_t> parameters, std::vector<std::string> types = {}) {
  if (types.empty()) types.assign(parameters.size(), "Layer");
  return {std::move(parameters), std::move(types), {}};
}

TEST(Partition, UniformSpreadsTheRemainderOverTheFirstStages) {
  EXPECT_EQ(partition_uniform(10, 3), (Partition{0, 4, 7, 10}));
  EXPECT_EQ(partition_uniform(8, 4), (Partition{0, 2, 4, 6, 8}));
  EXPECT_EQ(partition_uniform(3, 3), (Partition{0, 1, 2, 3}));
}

TEST(Partition, ParametersBalanceUnevenLayers) {
  // One heavy layer: it stands alone, the light ones share.
  EXPECT_EQ(partition_layers("parameters", facts({1, 1, 1, 1, 10, 1}), 2), (Partition{0, 4, 6}));
  EXPECT_EQ(partition_layers("parameters", facts({5, 1, 1, 1, 1, 1, 5}), 3),
            (Partition{0, 1, 6, 7}));
  // The heaviest stage is as light as it can be: 9 here ({4,5} | {3,3,3} | {9}).
  EXPECT_EQ(partition_layers("parameters", facts({4, 5, 3, 3, 3, 9}), 3), (Partition{0, 2, 5, 6}));
}

TEST(Partition, TypeBalancesMatchingLayers) {
  const auto layers = facts(
      {100, 10, 10, 10, 10, 2, 100},
      {"GptEmbedding", "GptBlock", "GptBlock", "GptBlock", "GptBlock", "LayerNorm", "GptHead"});
  EXPECT_EQ(partition_layers("type:gptblock", layers, 2), (Partition{0, 3, 7}));
  // Blocks and head match: 2+3 and 3+2 tie, the later cut wins.
  EXPECT_EQ(partition_layers("type:^Gpt(Block|Head)$", layers, 2), (Partition{0, 4, 7}));
}

TEST(Partition, ExplicitBoundaries) {
  EXPECT_EQ(partition_layers("boundaries:2,5", facts({1, 1, 1, 1, 1, 1, 1}), 3),
            (Partition{0, 2, 5, 7}));
}

TEST(Partition, ProfileBalancesMeasuredCosts) {
  LayerFacts layers = facts({1, 1, 1, 1});
  layers.profile_costs = {0.1, 0.1, 0.1, 0.5};
  EXPECT_EQ(partition_layers("profile", layers, 2), (Partition{0, 3, 4}));
}

TEST(Partition, BadRequestsAreInputErrors) {
  EXPECT_THROW(partition_layers("uniform", facts({1, 1}), 3), io::InputError);
  EXPECT_THROW(partition_layers("parameters", facts({1, 1}), 3), io::InputError);
  EXPECT_THROW(partition_layers("boundaries:2,2", facts({1, 1, 1, 1}), 3), io::InputError);
  EXPECT_THROW(partition_layers("boundaries:2", facts({1, 1, 1, 1}), 3), io::InputError);
  EXPECT_THROW(partition_layers("boundaries:x,3", facts({1, 1, 1, 1}), 3), io::InputError);
  EXPECT_THROW(partition_layers("type:[", facts({1, 1}), 2), io::InputError);
  EXPECT_THROW(partition_layers("random", facts({1, 1}), 2), io::InputError);
  try {
    partition_uniform(3, 4);
  } catch (const io::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot split 3 layers over 4 stages: every stage needs at least one layer");
  }
}

}  // namespace
}  // namespace pipetrain::module
