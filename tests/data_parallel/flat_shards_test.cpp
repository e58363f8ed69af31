// ZeRO's flat layout: tensors read as one padded vector cut into equal shards, or in
// buckets each cut into one piece per rank.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "data_parallel/flat_shards.h"

namespace pipetrain::engine {
namespace {

TEST(FlatShards, PadsToEqualShards) {
  const data_parallel::FlatShards layout({6, 1, 3}, 4);  // 10 elements
  EXPECT_EQ(layout.shard_size(), 3);
  EXPECT_EQ(layout.padded_size(), 12);
  EXPECT_EQ(layout.offset(0), 0);
  EXPECT_EQ(layout.offset(1), 6);
  EXPECT_EQ(layout.offset(2), 7);
}

TEST(FlatShards, ReadsRangesAcrossTensorsAndPadding) {
  const data_parallel::FlatShards layout({6, 1, 3}, 4);
  const std::vector<at::Tensor> tensors = {at::arange(6, at::kFloat).view({2, 3}),
                                           at::full({1}, 6.0f),
                                           at::arange(7, 10, at::kFloat).view({3, 1}).t()};
  at::Tensor whole = at::empty({12});
  layout.read(tensors, 0, whole);
  EXPECT_TRUE(at::equal(whole, at::cat({at::arange(10, at::kFloat), at::zeros({2})})));
  for (int r = 0; r < 4; ++r) {
    at::Tensor shard = at::full({3}, -1.0f);
    layout.read(tensors, r * 3, shard);
    EXPECT_TRUE(at::equal(shard, whole.narrow(0, r * 3, 3))) << "shard " << r;
  }
  at::Tensor middle = at::empty({2});  // the end of the first tensor, all of the second
  layout.read(tensors, 5, middle);
  EXPECT_TRUE(at::equal(middle, at::tensor({5.0f, 6.0f})));
}

TEST(FlatShards, CutsEachBucketIntoOnePiecePerRank) {
  // Bucket 0: tensors 2 and 1 (4 elements, no padding); bucket 1: tensor 0 (6, padded to 8).
  const data_parallel::FlatShards layout({6, 1, 3}, {{2, 1}, {0}}, 4);
  EXPECT_EQ(layout.buckets(), 2);
  EXPECT_EQ(layout.padded_size(), 12);
  EXPECT_EQ(layout.shard_size(), 3);
  EXPECT_EQ(layout.offset(2), 0);
  EXPECT_EQ(layout.offset(1), 3);
  EXPECT_EQ(layout.offset(0), 4);
  EXPECT_EQ(layout.bucket_of(0), 1);
  EXPECT_EQ(layout.bucket_begin(1), 4);
  EXPECT_EQ(layout.bucket_size(1), 8);
  const data_parallel::FlatShards::Piece piece = layout.piece(3, 1);
  EXPECT_EQ(piece.flat_begin, 10);
  EXPECT_EQ(piece.shard_begin, 1);
  EXPECT_EQ(piece.size, 2);

  const std::vector<at::Tensor> tensors = {at::arange(10, 16, at::kFloat).view({2, 3}),
                                           at::full({1}, 3.0f), at::arange(3, at::kFloat)};
  at::Tensor whole = at::empty({12});
  layout.read(tensors, 0, whole);
  EXPECT_TRUE(at::equal(
      whole, at::cat({at::arange(4, at::kFloat), at::arange(10, 16, at::kFloat), at::zeros({2})})));
  std::vector<at::Tensor> shards;
  for (int r = 0; r < 4; ++r) {
    at::Tensor shard = at::full({3}, -1.0f);
    layout.read_shard(tensors, r, shard);
    // Element r of bucket 0, then elements 2r and 2r + 1 of bucket 1.
    const at::Tensor expected = at::stack({whole[r], whole[4 + 2 * r], whole[5 + 2 * r]});
    EXPECT_TRUE(at::equal(shard, expected)) << "rank " << r;
    EXPECT_TRUE(at::equal(layout.shard_of(whole, r), expected)) << "rank " << r;
    shards.push_back(shard);
  }
  EXPECT_TRUE(at::equal(layout.join(at::stack(shards)), whole));
}

TEST(FlatShards, RefusesATensorInNoBucketOrTwo) {
  EXPECT_THROW(data_parallel::FlatShards({3, 4}, {{0}}, 2), std::invalid_argument);
  EXPECT_THROW(data_parallel::FlatShards({3, 4}, {{0, 1}, {1}}, 2), std::invalid_argument);
}

TEST(FlatShards, ConvertsToTheOutputsType) {
  const data_parallel::FlatShards layout({3}, 2);
  at::Tensor out = at::empty({4}, at::kDouble);
  layout.read({at::tensor({1.5f, 2.5f, 3.5f}).to(at::kBFloat16)}, 0, out);
  EXPECT_TRUE(at::equal(out, at::tensor({1.5, 2.5, 3.5, 0.0}, at::kDouble)));
}

TEST(FlatShards, RefusesRangesOutsideTheLayout) {
  const data_parallel::FlatShards layout({3}, 2);
  at::Tensor out = at::empty({2});
  EXPECT_THROW(layout.read({at::zeros({3})}, 3, out), std::invalid_argument);
  EXPECT_THROW(layout.read({}, 0, out), std::invalid_argument);
  EXPECT_THROW(data_parallel::FlatShards({3}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace pipetrain::engine
