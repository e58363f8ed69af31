// Each tensor-parallel layer against its plain LibTorch counterpart holding the same full
// weights: outputs, input gradients and every shard's weight gradient (slices of the
// full gradient). Runs inside the equivalence program, on the model axis of the grid.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "device/cpu_memory.h"
#include "model_group.h"
#include "pipetrain/tensor_parallel/layers.h"
#include "tensor_parallel/collectives.h"

namespace pipetrain::tensor_parallel {
namespace {

void expect_close(const at::Tensor& got, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, expected, 1e-5, 1e-6))
      << what << " differs by " << (got - expected).abs().max().item<double>();
}

// The full weight a layer was built from: draw it again under the same seed.
at::Tensor full_normal(at::IntArrayRef shape, uint64_t seed) {
  at::manual_seed(seed);
  return at::empty(shape).normal_(0.0, 0.02);
}

TEST(TensorParallelLayers, ColumnParallelLinearWithGatheredOutputMatchesLinear) {
  const Group group = testing::model_group_of_two();
  at::manual_seed(7);
  ColumnParallelLinear layer(6, 8, group, LinearOptions{}, /*stride=*/1, /*gather_output=*/true);
  const at::Tensor weight = full_normal({8, 6}, 7).requires_grad_(true);
  at::manual_seed(1);
  const at::Tensor x = at::randn({3, 6});
  const at::Tensor x_parallel = x.clone().requires_grad_(true);
  const at::Tensor x_plain = x.clone().requires_grad_(true);
  const at::Tensor weights_of_outputs = at::randn({3, 8});

  const at::Tensor y = layer(x_parallel);
  (y * weights_of_outputs).sum().backward();
  const at::Tensor expected = at::linear(x_plain, weight);
  (expected * weights_of_outputs).sum().backward();

  expect_close(y, expected, "output");
  expect_close(x_parallel.grad(), x_plain.grad(), "input gradient");
  expect_close(layer->weight.grad(), take_shard(weight.grad(), {0, 1}, group.rank(), 2),
               "weight gradient shard");
}

TEST(TensorParallelLayers, RowParallelLinearMatchesLinear) {
  const Group group = testing::model_group_of_two();
  at::manual_seed(8);
  RowParallelLinear layer(8, 5, group);
  const at::Tensor weight = full_normal({5, 8}, 8).requires_grad_(true);
  at::manual_seed(2);
  const at::Tensor x = at::randn({3, 8}).requires_grad_(true);
  const at::Tensor x_shard = x.detach().chunk(2, -1)[group.rank()].clone().requires_grad_(true);

  const at::Tensor y = layer(x_shard);
  y.pow(2).sum().backward();
  const at::Tensor expected = at::linear(x, weight, layer->bias.detach());
  expected.pow(2).sum().backward();

  expect_close(y, expected, "output");
  expect_close(x_shard.grad(), x.grad().chunk(2, -1)[group.rank()], "input gradient shard");
  expect_close(layer->weight.grad(), take_shard(weight.grad(), {1, 1}, group.rank(), 2),
               "weight gradient shard");
}

TEST(TensorParallelLayers, VocabParallelEmbeddingAndCrossEntropyMatchThePlainOnes) {
  const Group group = testing::model_group_of_two();
  at::manual_seed(9);
  VocabParallelEmbedding embedding(10, 4, group);
  const at::Tensor table = full_normal({10, 4}, 9).requires_grad_(true);
  const at::Tensor ids = at::tensor({0, 4, 5, 9, 3, 7}, at::kLong).view({2, 3});
  EXPECT_EQ(embedding->first_row(), 5 * group.rank());

  // Logits over the vocabulary from the embedded tokens, as a tied LM head computes them.
  const at::Tensor labels = at::tensor({9, 0, 5, 4, 6, 1}, at::kLong).view({2, 3});
  const at::Tensor h = embedding(ids);
  const at::Tensor loss = vocab_parallel_cross_entropy(
      at::matmul(copy_to_group(h, group), embedding->weight.t()), labels, group);
  loss.backward();
  const at::Tensor h_plain = at::embedding(table, ids);
  const at::Tensor expected = at::cross_entropy_loss(
      at::matmul(h_plain, table.t()).reshape({-1, 10}), labels.reshape({-1}));
  expected.backward();

  expect_close(h, h_plain, "embedding output");
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-6);
  expect_close(embedding->weight.grad(), take_shard(table.grad(), {0, 1}, group.rank(), 2),
               "table gradient shard (lookup and head)");
}

TEST(TensorParallelLayers, VocabParallelCrossEntropyKeepsOneTensorOfTheLogitsSize) {
  // What the loss keeps for backward: the exponentials of this rank's logits (their size),
  // a few per-token values, never the logits themselves a second time.
  device::count_cpu_memory();  // once per process: counts what is allocated from now on
  const Group group = testing::model_group_of_two();
  at::manual_seed(4);
  const at::Tensor logits = at::randn({8, 256, 512}).requires_grad_(true);  // 4 MiB a rank
  const at::Tensor labels = at::randint(1024, {8, 256}, at::kLong);
  const int64_t before = device::cpu_memory()->allocated;
  at::Tensor loss = vocab_parallel_cross_entropy(logits, labels, group);
  const int64_t kept = device::cpu_memory()->allocated - before;
  const int64_t size = logits.numel() * logits.element_size();
  EXPECT_GE(kept, size);
  EXPECT_LT(kept, size + size / 4) << "kept " << kept << " bytes for logits of " << size;
  loss.backward();
}

TEST(TensorParallelLayers, VocabParallelCrossEntropyRefusesALabelOutsideTheVocabulary) {
  const Group group = testing::model_group_of_two();
  const at::Tensor logits = at::zeros({2, 3, 5});  // each rank's 5 of the 10 rows
  for (const int64_t label : {int64_t{10}, int64_t{-1}}) {
    const at::Tensor labels = at::full({2, 3}, label, at::kLong);
    EXPECT_THROW(
        {
          try {
            vocab_parallel_cross_entropy(logits, labels, group);
          } catch (const std::invalid_argument& e) {
            EXPECT_STREQ(e.what(),
                         "labels must lie in [0, 10), the vocabulary split over the "
                         "tensor-parallel group, or be -100 (not counted)");
            throw;
          }
        },
        std::invalid_argument)
        << label;
  }
}

// Labels of -100 count in no loss: the split cross-entropy's mean and sum over the rest
// equal PyTorch's over the whole logits.
TEST(TensorParallelLayers, VocabParallelCrossEntropyCountsOnlyTheLabelsThatCount) {
  const Group group = testing::model_group_of_two();
  at::manual_seed(3);  // the same whole logits and labels on both ranks
  const at::Tensor whole = at::randn({2, 3, 10});
  at::Tensor labels = at::randint(10, {2, 3}, at::kLong);
  labels.index_put_({0, 1}, kIgnoreIndex);
  labels.index_put_({1, 2}, kIgnoreIndex);
  const at::Tensor mine = whole.narrow(2, group.rank() * 5, 5).contiguous();
  for (const auto& [reduction, torch_reduction] :
       {std::pair{TokenReduction::kMean, at::Reduction::Mean},
        std::pair{TokenReduction::kSum, at::Reduction::Sum}}) {
    const at::Tensor expected = at::cross_entropy_loss(
        whole.reshape({-1, 10}), labels.reshape({-1}), {}, torch_reduction, kIgnoreIndex);
    const at::Tensor got = vocab_parallel_cross_entropy(mine, labels, group, reduction);
    EXPECT_NEAR(got.item<double>(), expected.item<double>(),
                1e-6 * std::max(1.0, std::abs(expected.item<double>())));  // float32 sums
  }
}

}  // namespace
}  // namespace pipetrain::tensor_parallel
