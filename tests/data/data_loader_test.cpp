#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "pipetrain/data/data_source.h"

namespace pipetrain::data {
namespace {

TEST(DistributedIndices, ShardsLikeTorchsSampler) {
  EXPECT_EQ(distributed_indices(10, 2, 0, false, 0, 0), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(distributed_indices(10, 2, 1, false, 0, 0), (std::vector<int64_t>{1, 3, 5, 7, 9}));
  // Padding by wrapping: 10 samples over 4 replicas become 12.
  EXPECT_EQ(distributed_indices(10, 4, 3, false, 0, 0), (std::vector<int64_t>{3, 7, 1}));
  const auto a = distributed_indices(100, 1, 0, true, 5, 0);
  EXPECT_EQ(a, distributed_indices(100, 1, 0, true, 5, 0));  // seeded
  EXPECT_NE(a, distributed_indices(100, 1, 0, true, 5, 1));  // another epoch, another order
}

TEST(DataLoader, RunsOutAndTheRepeatingLoaderGoesOn) {
  auto data = std::make_shared<TensorDataset>(comm::TensorList{at::arange(6).reshape({6, 1})},
                                              comm::TensorList{at::arange(6)});
  DataLoader loader(data, 2, 1, 0);
  EXPECT_TRUE(at::equal(loader.next().labels[0], at::tensor({0, 1}, at::kLong)));
  loader.next();
  loader.next();
  EXPECT_THROW(loader.next(), engine::DataExhausted);

  RepeatingLoader repeating(std::make_unique<DataLoader>(data, 4, 1, 0));
  EXPECT_TRUE(at::equal(repeating.next().labels[0], at::tensor({0, 1, 2, 3}, at::kLong)));
  EXPECT_TRUE(
      at::equal(repeating.next().labels[0], at::tensor({0, 1, 2, 3}, at::kLong)));  // epoch 1
}

}  // namespace
}  // namespace pipetrain::data
