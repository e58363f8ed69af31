// Activation checkpointing changes memory, not math: with dropout on, losses and
// gradients equal those without it, and the activations held after forward shrink.
#include <gtest/gtest.h>
#include <malloc.h>

#include <ATen/ATen.h>

#include "pipetrain/models/gpt/gpt.h"
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

Result run(int interval, RecomputeSet recompute = {}) {
  PipelineModule module(
      models::gpt_layers(gpt()), models::gpt_loss(),
      {.seed = 11, .activation_checkpoint_interval = interval, .recompute = recompute});
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

// Selective recompute: each part alone, and with whole layers checkpointed around it, gives
// the plain run's loss and gradients (dropout in attention and after it drawn alike) and
// keeps less after forward.
TEST(SelectiveRecompute, SameGradientsWithDropoutAndLessMemoryForEachPart) {
  const Result plain = run(0);
  std::vector<std::pair<std::string, RecomputeSet>> choices;
  for (const auto& [name, kind] : recompute_kinds()) {
    if (kind != RecomputeKind::kExperts) choices.emplace_back(name, RecomputeSet().add(kind));
  }
  choices.emplace_back("attention, mlp and norms", RecomputeSet()
                                                       .add(RecomputeKind::kAttention)
                                                       .add(RecomputeKind::kMlp)
                                                       .add(RecomputeKind::kNorms));
  for (const auto& [name, kinds] : choices) {
    for (const int interval : {0, 2}) {
      SCOPED_TRACE(name + ", whole layers checkpointed every " + std::to_string(interval));
      const Result recomputed = run(interval, kinds);
      EXPECT_TRUE(at::equal(recomputed.loss, plain.loss));
      ASSERT_EQ(recomputed.grads.size(), plain.grads.size());
      for (const auto& [parameter, grad] : plain.grads) {
        ASSERT_TRUE(recomputed.grads.at(parameter).defined()) << parameter;
        EXPECT_TRUE(at::allclose(recomputed.grads.at(parameter), grad, 1e-5, 1e-7)) << parameter;
      }
      if (interval == 0) {
        std::printf("activations held after forward: %.2f MiB plain, %.2f MiB recomputing %s\n",
                    plain.held_bytes / 1048576.0, recomputed.held_bytes / 1048576.0, name.c_str());
        // A fused LayerNorm keeps only its statistics beside the input the next layer
        // keeps anyway: recomputing the GPT's norms frees next to nothing (a LLaMA's RMSNorm
        // in plain operators frees its intermediates).
        if (name != "norms") {
          EXPECT_LT(recomputed.held_bytes, plain.held_bytes * 0.9);
        }
      }
    }
  }
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
