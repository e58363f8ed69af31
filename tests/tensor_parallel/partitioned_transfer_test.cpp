// Partitioned transfers inside a group of two: shares of tensors whose sizes do not
// divide by the group (zero-padded) and of a one-element tensor come back whole, with
// dtype and requires-grad; receivers that got different layouts all refuse.
#include "comm/partitioned_transfer.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "model_group.h"

namespace pipetrain::comm {
namespace {

TEST(PartitionedTransfer, UnevenSizesComeBackWhole) {
  const auto group = testing::model_group_of_two();
  const std::vector<at::Tensor> tensors = {
      at::arange(21, at::kFloat).view({3, 7}).requires_grad_(true),
      at::tensor({5}, at::kLong),
      at::arange(3, at::kDouble),
  };
  const comm::PartitionedTensors mine = comm::partition(tensors, group.rank(), group.size());
  ASSERT_EQ(mine.shares.size(), 3u);
  EXPECT_EQ(mine.shares[0].numel(), 11);  // ceil(21 / 2); rank 1's last element is padding
  EXPECT_EQ(mine.shares[1].numel(), 1);
  const std::vector<at::Tensor> whole = comm::assemble(mine, *group.comm, *group.comm);
  ASSERT_EQ(whole.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_TRUE(at::equal(whole[i], tensors[i].detach())) << i;
    EXPECT_EQ(whole[i].scalar_type(), tensors[i].scalar_type()) << i;
  }
  EXPECT_TRUE(whole[0].requires_grad());
  EXPECT_FALSE(whole[2].requires_grad());
}

TEST(PartitionedTransfer, RanksWithDifferentLayoutsRefuse) {
  const auto group = testing::model_group_of_two();
  const at::Tensor tensor = at::zeros({group.rank() == 0 ? 4 : 6});
  const comm::PartitionedTensors mine = comm::partition({tensor}, group.rank(), group.size());
  EXPECT_THROW(comm::assemble(mine, *group.comm, *group.comm), std::runtime_error);
}

}  // namespace
}  // namespace pipetrain::comm
