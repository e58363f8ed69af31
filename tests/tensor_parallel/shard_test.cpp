#include "pipetrain/tensor_parallel/shard.h"

#include <gtest/gtest.h>

#include <optional>

#include <ATen/ATen.h>

#include "pipetrain/tensor_parallel/layers.h"
#include "tensor_parallel/initialization.h"

namespace pipetrain::tensor_parallel {
namespace {

TEST(Shard, FusedQkvRowsSplitPerBlockAndJoinBack) {
  // Rows q0 q1 q2 q3 | k0 k1 k2 k3 | v0 v1 v2 v3 over two ranks, stride 3: rank 1 holds
  // q2 q3 k2 k3 v2 v3.
  const at::Tensor full = at::arange(12, at::kFloat).view({12, 1});
  const at::Tensor shard = take_shard(full, {0, 3}, 1, 2);
  EXPECT_TRUE(at::equal(shard.view({-1}), at::tensor({2, 3, 6, 7, 10, 11}, at::kFloat)));
  const at::Tensor stacked = at::stack({take_shard(full, {0, 3}, 0, 2), shard});
  EXPECT_TRUE(at::equal(join_shards(stacked, {0, 3}), full));
}

TEST(Shard, ColumnsRoundTripForEveryGroupSize) {
  const at::Tensor full = at::randn({3, 12});
  for (int size : {1, 2, 3, 4, 6}) {
    std::vector<at::Tensor> shards;
    for (int r = 0; r < size; ++r) shards.push_back(take_shard(full, {1, 1}, r, size));
    EXPECT_EQ(shards[0].sizes(), at::IntArrayRef({3, 12 / size}));
    EXPECT_EQ(full_shape(shards[0].sizes(), {1, 1}, size), full.sizes().vec());
    EXPECT_TRUE(at::equal(join_shards(at::stack(shards), {1, 1}), full)) << size;
  }
}

TEST(Shard, UnevenSplitsAreRefused) {
  EXPECT_THROW(take_shard(at::zeros({10, 2}), {0, 1}, 0, 4), std::invalid_argument);
  EXPECT_THROW(take_shard(at::zeros({12, 2}), {0, 3}, 0, 8), std::invalid_argument);
  EXPECT_THROW(join_shards(at::zeros({2, 4, 2}), {0, 3}), std::invalid_argument);
}

// A layer built under SkippedInitialization draws nothing from the generator (the next
// draw is the one it would have been without the layer); without it, the layer draws.
TEST(Initialization, SkippedLayersLeaveTheGeneratorAlone) {
  auto next_draw_after = [](bool skip, bool build) {
    at::manual_seed(3);
    if (build) {
      std::optional<SkippedInitialization> skipped;
      if (skip) skipped.emplace();
      ColumnParallelLinear layer(16, 32, Group{});
      EXPECT_EQ(layer->weight.sizes(), at::IntArrayRef({32, 16}));
    }
    return at::randn({4});
  };
  const at::Tensor untouched = next_draw_after(false, false);
  EXPECT_TRUE(at::equal(next_draw_after(true, true), untouched));
  EXPECT_FALSE(at::equal(next_draw_after(false, true), untouched));
  {
    const SkippedInitialization outer;
    { const SkippedInitialization inner; }
    EXPECT_TRUE(at::equal(next_draw_after(false, true), next_draw_after(false, false)))
        << "the outer guard still holds after the inner one ends";
  }
}

}  // namespace
}  // namespace pipetrain::tensor_parallel
