// The linear layer whose weight gradient a backward pass may defer (zero-bubble schedules).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "autograd/linear.h"
#include "autograd/weight_grad_store.h"
#include "module/activation_checkpoint.h"

namespace pipetrain::autograd {
namespace {

struct Net {
  at::Tensor w1 = at::randn({5, 4}).requires_grad_(true);
  at::Tensor b1 = at::randn({5}).requires_grad_(true);
  at::Tensor w2 = at::randn({3, 5}).requires_grad_(true);

  at::Tensor forward(const at::Tensor& x) const {
    return autograd::linear(at::tanh(autograd::linear(x, w1, b1)), w2);
  }
  std::vector<at::Tensor> parameters() const { return {w1, b1, w2}; }
};

struct Gradients {
  at::Tensor x, w1, b1, w2;
};

Gradients plain_gradients(const Net& net, const at::Tensor& x, const at::Tensor& g) {
  const at::Tensor xx = x.detach().requires_grad_(true);
  const auto grads =
      torch::autograd::grad({at::linear(at::tanh(at::linear(xx, net.w1, net.b1)), net.w2)},
                            {xx, net.w1, net.b1, net.w2}, {g});
  return {grads[0], grads[1], grads[2], grads[3]};
}

TEST(SplittableLinear, OutsideTheScopesItIsAtenLinear) {
  at::manual_seed(0);
  Net net;
  const at::Tensor x = at::randn({2, 6, 4});
  EXPECT_TRUE(
      at::equal(net.forward(x), at::linear(at::tanh(at::linear(x, net.w1, net.b1)), net.w2)));
  EXPECT_FALSE(recording_splittable());
}

TEST(SplittableLinear, BackwardInputLeavesTheWeightGradientForLater) {
  at::manual_seed(0);
  Net net;
  const at::Tensor x = at::randn({2, 6, 4}).requires_grad_(true);
  const at::Tensor g = at::randn({2, 6, 3});
  const Gradients expected = plain_gradients(net, x, g);

  at::Tensor y;
  {
    const SplittableBackward splittable;
    y = net.forward(x);
  }
  WeightGradStore store;
  {
    const DeferWeightGrads deferring(store);
    torch::autograd::backward({y}, {g});
  }
  // The input and the bias have their gradients; the linear weights do not, yet.
  EXPECT_TRUE(at::allclose(x.grad(), expected.x, 1e-6, 1e-6));
  EXPECT_TRUE(at::allclose(net.b1.grad(), expected.b1, 1e-6, 1e-6));
  EXPECT_FALSE(net.w1.grad().defined());
  EXPECT_FALSE(net.w2.grad().defined());
  EXPECT_FALSE(store.empty());

  store.run();
  EXPECT_TRUE(store.empty());
  EXPECT_TRUE(at::allclose(net.w1.grad(), expected.w1, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(net.w2.grad(), expected.w2, 1e-5, 1e-6));

  // A second deferred gradient accumulates like autograd's.
  {
    const SplittableBackward splittable;
    y = net.forward(x);
  }
  {
    const DeferWeightGrads deferring(store);
    torch::autograd::backward({y}, {g});
  }
  store.run();
  EXPECT_TRUE(at::allclose(net.w2.grad(), 2 * expected.w2, 1e-5, 1e-6));
}

TEST(SplittableLinear, WithoutADeferringScopeTheBackwardIsWhole) {
  at::manual_seed(0);
  Net net;
  const at::Tensor x = at::randn({3, 4}).requires_grad_(true);
  const at::Tensor g = at::randn({3, 3});
  const Gradients expected = plain_gradients(net, x, g);
  at::Tensor y;
  {
    const SplittableBackward splittable;
    y = net.forward(x);
  }
  torch::autograd::backward({y}, {g});
  EXPECT_TRUE(at::allclose(net.w1.grad(), expected.w1, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(net.w2.grad(), expected.w2, 1e-5, 1e-6));
}

TEST(SplittableLinear, CheckpointedRunsDeferTheirRecomputedWeightGradients) {
  at::manual_seed(0);
  Net net;
  const at::Tensor x = at::randn({2, 6, 4}).requires_grad_(true);
  const at::Tensor g = at::randn({2, 6, 3});
  const Gradients expected = plain_gradients(net, x, g);
  module::Activation y;
  {
    const SplittableBackward splittable;
    y = module::checkpointed(
        [&](const module::Activation& in) { return module::Activation{net.forward(in.at(0))}; },
        {x}, net.parameters());
  }
  WeightGradStore store;
  {
    const DeferWeightGrads deferring(store);
    torch::autograd::backward({y.at(0)}, {g});
  }
  EXPECT_TRUE(at::allclose(x.grad(), expected.x, 1e-6, 1e-6));
  EXPECT_FALSE(net.w2.grad().defined());
  store.run();
  EXPECT_TRUE(at::allclose(net.w1.grad(), expected.w1, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(net.w2.grad(), expected.w2, 1e-5, 1e-6));
}

}  // namespace
}  // namespace pipetrain::autograd
