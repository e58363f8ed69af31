// FusedAdam(W) and FusedSgd (ATen's fused kernels, used for CUDA parameters) step as
// LibTorch's Adam(W) and SGD do; checked here on the CPU, where ATen has the same kernels.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "optim/fused_adam.h"
#include "optim/fused_sgd.h"
#include "optim/optimizer_state.h"

namespace pipetrain::optim {
namespace {

std::vector<at::Tensor> parameters(uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({7, 5}).requires_grad_(true), at::randn({5}).requires_grad_(true),
          at::randn({3, 3}).requires_grad_(true)};
}

template <typename Fused, typename Plain, typename Options>
void expect_same_steps(const Options& options) {
  auto a = parameters(1);
  auto b = parameters(1);
  Fused fused(a, options);
  Plain plain(b, options);
  for (int step = 0; step < 4; ++step) {
    at::manual_seed(100 + step);
    for (std::size_t i = 0; i < a.size(); ++i) {
      // A parameter without a gradient is left alone; one whose first gradient comes a step
      // later than the others' gets its state then.
      if ((step == 2 && i == 1) || (step == 0 && i == 2)) continue;
      const at::Tensor grad = at::randn(a[i].sizes());
      a[i].mutable_grad() = grad.clone();
      b[i].mutable_grad() = grad.clone();
    }
    fused.step();
    plain.step();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(at::allclose(a[i], b[i], 1e-6, 1e-7)) << "step " << step << " tensor " << i;
      a[i].mutable_grad() = at::Tensor();
      b[i].mutable_grad() = at::Tensor();
    }
  }
  // The state checkpoints save is LibTorch's: the same fields and step counts.
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto fused_state = optimizer_state(fused, a[i]);
    const auto plain_state = optimizer_state(plain, b[i]);
    ASSERT_EQ(fused_state.size(), plain_state.size());
    for (std::size_t k = 0; k < fused_state.size(); ++k) {
      EXPECT_EQ(fused_state[k].first, plain_state[k].first);
      EXPECT_TRUE(at::allclose(fused_state[k].second.to(at::kDouble),
                               plain_state[k].second.to(at::kDouble), 1e-5, 1e-7))
          << fused_state[k].first;
    }
  }
}

TEST(FusedAdam, StepsAsLibTorchsAdamWithL2WeightDecay) {
  expect_same_steps<FusedAdam, torch::optim::Adam>(
      torch::optim::AdamOptions(0.01).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.1));
}

TEST(FusedAdamW, StepsAsLibTorchsAdamWWithDecoupledDecay) {
  expect_same_steps<FusedAdamW, torch::optim::AdamW>(
      torch::optim::AdamWOptions(0.01).betas({0.9, 0.99}).eps(1e-8).weight_decay(0.05));
}

TEST(FusedSgd, StepsAsLibTorchsSgdWithMomentumAndWeightDecay) {
  expect_same_steps<FusedSgd, torch::optim::SGD>(
      torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
}

TEST(FusedSgd, StepsAsLibTorchsSgdWithNesterovAndDampening) {
  expect_same_steps<FusedSgd, torch::optim::SGD>(
      torch::optim::SGDOptions(0.05).momentum(0.8).dampening(0.1).weight_decay(0.01));
  expect_same_steps<FusedSgd, torch::optim::SGD>(
      torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
}

TEST(FusedSgd, StepsAsLibTorchsSgdWithoutMomentum) {
  expect_same_steps<FusedSgd, torch::optim::SGD>(torch::optim::SGDOptions(0.1));
}

}  // namespace
}  // namespace pipetrain::optim
