// Activation checkpointing changes memory, not math: with dropout on, losses and
// gradients equal those without it, and the activations held after forward shrink.
#include <gtest/gtest.h>
#include <malloc.h>

#include <ATen/ATen.h>

#include "pipetrain/models/gpt.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::module {
namespace {

models::GptConfig gpt() {
  return {.vocab_size = 64, .context = 64, .d_model = 64, .heads = 4, .layers = 6, .dropout = 0.1};
}

struct Result {
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;
  std::size_t held_bytes = 0;  // heap growth from before forward to after it
};

std::size_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

Result run(int interval) {
  PipelineModule module(models::gpt_layers(gpt()), models::gpt_loss(),
                        {.seed = 11, .activation_checkpoint_interval = interval});
  at::manual_seed(5);
  const at::Tensor ids = at::randint(64, {16, 64}, at::kLong);
  const at::Tensor labels = at::randint(64, {16, 64}, at::kLong);
  at::manual_seed(9);  // the dropout stream starts at the same point in both runs
  Result result;
  const std::size_t before = heap_in_use();
  const Activation logits = module.forward({ids});
  result.loss = module.loss(logits, {labels});
  result.held_bytes = heap_in_use() - before;
  result.loss.backward();
  for (const auto& [name, tensor] : module.named_parameters()) result.grads[name] = tensor.grad();
  return result;
}

TEST(ActivationCheckpoint, SameGradientsWithDropoutAndLessMemory) {
  const Result plain = run(0);
  const Result checkpointed = run(2);
  EXPECT_TRUE(at::equal(checkpointed.loss, plain.loss));
  ASSERT_EQ(checkpointed.grads.size(), plain.grads.size());
  for (const auto& [name, grad] : plain.grads) {
    ASSERT_TRUE(checkpointed.grads.at(name).defined()) << name;
    EXPECT_TRUE(at::allclose(checkpointed.grads.at(name), grad, 1e-5, 1e-7)) << name;
  }
  std::printf("activations held after forward: %.2f MiB plain, %.2f MiB with interval 2\n",
              plain.held_bytes / 1048576.0, checkpointed.held_bytes / 1048576.0);
  EXPECT_LT(checkpointed.held_bytes, plain.held_bytes / 2);
}

TEST(ActivationCheckpoint, DropoutIsActuallyOn) {
  // Guards the test above: two forwards with different dropout streams must differ.
  PipelineModule module(models::gpt_layers(gpt()), models::gpt_loss(), {.seed = 11});
  const at::Tensor ids = at::randint(64, {2, 64}, at::kLong);
  at::manual_seed(1);
  const at::Tensor a = module.forward({ids})[0];
  at::manual_seed(2);
  const at::Tensor b = module.forward({ids})[0];
  EXPECT_FALSE(at::equal(a, b));
}

}  // namespace
}  // namespace pipetrain::module
