// Rows grouped by the weight that takes them (an MoE layer's experts), with a weight
// gradient a backward pass may defer.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "pipetrain/autograd/grouped_linear.h"
#include "pipetrain/autograd/weight_grad_store.h"

namespace pipetrain::autograd {
namespace {

// Three groups of 4, 0 and 3 rows: the empty one gets a zero gradient.
struct Grouped {
  at::Tensor weights = at::randn({3, 5, 4}).requires_grad_(true);
  std::vector<int64_t> counts{4, 0, 3};

  // As one loop of ATen's linear per group would compute it.
  at::Tensor plain(const at::Tensor& x) const {
    return at::cat(
        {at::linear(x.narrow(0, 0, 4), weights[0]), at::linear(x.narrow(0, 4, 3), weights[2])});
  }
};

TEST(GroupedLinear, OutsideTheScopesItIsAtenLinearPerGroup) {
  at::manual_seed(0);
  const Grouped net;
  const at::Tensor x = at::randn({7, 4});
  EXPECT_TRUE(at::equal(grouped_linear(x, net.weights, net.counts), net.plain(x)));
  EXPECT_THROW(grouped_linear(x, net.weights, {4, 3}), std::invalid_argument);
}

TEST(GroupedLinear, BackwardInputLeavesTheWeightGradientForLater) {
  at::manual_seed(0);
  const Grouped net;
  const at::Tensor x = at::randn({7, 4}).requires_grad_(true);
  const at::Tensor g = at::randn({7, 5});
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
  EXPECT_TRUE(at::equal(net.weights.grad()[1], at::zeros({5, 4})));

  // Recorded splittable but run without a store: the weight gradient at once, as autograd's.
  net.weights.mutable_grad() = at::Tensor();
  {
    const SplittableBackward splittable;
    y = at::tanh(grouped_linear(x, net.weights, net.counts));
  }
  torch::autograd::backward({y}, {g});
  EXPECT_TRUE(at::allclose(net.weights.grad(), expected[1], 1e-5, 1e-6));
}

}  // namespace
}  // namespace pipetrain::autograd
