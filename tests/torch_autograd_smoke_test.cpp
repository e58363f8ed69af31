// One process, real LibTorch autograd: the gradient of a tiny regression matches the
// closed form, and one SGD step lowers the loss.
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <ATen/ATen.h>

TEST(TorchAutogradSmoke, GradientOfLinearRegressionMatchesClosedForm) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({8, 3}, at::kDouble);
  const at::Tensor y = at::randn({8, 1}, at::kDouble);
  at::Tensor w = at::zeros({3, 1}, at::kDouble).requires_grad_(true);

  const at::Tensor loss = (x.matmul(w) - y).pow(2).mean();
  loss.backward();

  // d/dw mean((xw - y)^2) = 2/N * x^T (xw - y)
  const at::Tensor expected = 2.0 / 8 * x.t().matmul(x.matmul(w.detach()) - y);
  EXPECT_TRUE(at::allclose(w.grad(), expected, 1e-12, 1e-12));

  const at::Tensor stepped = w.detach() - 0.1 * w.grad();
  const double after = (x.matmul(stepped) - y).pow(2).mean().item<double>();
  EXPECT_LT(after, loss.item<double>());
}
