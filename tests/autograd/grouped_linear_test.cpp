// Rows grouped by the weight that takes them (an MoE layer's experts), with a weight
// gradient a backward pass may defer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "autograd/grouped_linear.h"
#include "autograd/weight_grad_store.h"

namespace pipetrain::autograd {
namespace {

// Three groups of 4, 0 and 3 rows (the empty one gets a zero gradient), in widths ATen's
// grouped GEMM takes (rows of a multiple of 16 bytes) or not (a loop of products).
struct Grouped {
  int64_t in, out;
  at::Tensor weights = at::randn({3, out, in}).requires_grad_(true);
  std::vector<int64_t> counts{4, 0, 3};

  // As one loop of ATen's linear per group would compute it.
  at::Tensor plain(const at::Tensor& x) const {
    return at::cat(
        {at::linear(x.narrow(0, 0, 4), weights[0]), at::linear(x.narrow(0, 4, 3), weights[2])});
  }
};

class GroupedLinear : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(GroupedLinear, ForwardIsAtenLinearPerGroup) {
  at::manual_seed(0);
  const Grouped net{GetParam().first, GetParam().second};
  const at::Tensor x = at::randn({7, net.in});
  EXPECT_TRUE(at::allclose(grouped_linear(x, net.weights, net.counts), net.plain(x), 1e-6, 1e-6));
  EXPECT_THROW(grouped_linear(x, net.weights, {4, 3}), std::invalid_argument);
}

TEST_P(GroupedLinear, BackwardInputLeavesTheWeightGradientForLater) {
  at::manual_seed(0);
  const Grouped net{GetParam().first, GetParam().second};
  const at::Tensor x = at::randn({7, net.in}).requires_grad_(true);
  const at::Tensor g = at::randn({7, net.out});
  const at::Tensor xx = x.detach().requires_grad_(true);
  const auto expected = torch::autograd::grad({at::tanh(net.plain(xx))}, {xx, net.weights}, {g});

  at::Tensor y;
  {
    const SplittableBackward splittable;
    y = at::tanh(grouped_linear(x, net.weights, net.counts));
  }
  WeightGradStore store;
  {
    const DeferWeightGrads deferring(store);
    torch::autograd::backward({y}, {g});
  }
  EXPECT_TRUE(at::allclose(x.grad(), expected[0], 1e-6, 1e-6));
  EXPECT_FALSE(net.weights.grad().defined());
  EXPECT_FALSE(store.empty());
  store.run();
  EXPECT_TRUE(at::allclose(net.weights.grad(), expected[1], 1e-5, 1e-6));
  EXPECT_TRUE(at::equal(net.weights.grad()[1], at::zeros({net.out, net.in})));

  // Without a store the weight gradient comes at once, through autograd.
  net.weights.mutable_grad() = at::Tensor();
  y = at::tanh(grouped_linear(x, net.weights, net.counts));
  torch::autograd::backward({y}, {g});
  EXPECT_TRUE(at::allclose(net.weights.grad(), expected[1], 1e-5, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(Widths, GroupedLinear,
                         ::testing::Values(std::make_pair(int64_t{4}, int64_t{5}),     // a loop
                                           std::make_pair(int64_t{8}, int64_t{12})));  // one GEMM

}  // namespace
}  // namespace pipetrain::autograd
