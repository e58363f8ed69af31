// The LLaMA computes its rotary angles once per forward for all of a stage's blocks (as
// transformers' LlamaModel does), not once per block, and again per decode step.
#include <gtest/gtest.h>

#include <algorithm>

#include "op_recorder.h"
#include "pipetrain/models/gpt.h"
#include "pipetrain/models/llama.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::testing {
namespace {

int64_t cosines(const std::vector<RecordedOp>& ops) {
  return std::count_if(ops.begin(), ops.end(),
                       [](const RecordedOp& op) { return op.name == "aten::cos"; });
}

TEST(LlamaOps, RotaryAnglesOncePerForwardForEveryBlock) {
  const models::LlamaConfig config{.vocab_size = 64,
                                   .context = 16,
                                   .d_model = 32,
                                   .heads = 4,
                                   .num_key_value_heads = 2,
                                   .intermediate_size = 48,
                                   .layers = 3};
  module::PipelineModule model(models::llama_layers(config), models::gpt_loss(), {});
  const at::Tensor ids = at::randint(config.vocab_size, {2, 12}, at::kLong);
  module::Activation first, second;
  EXPECT_EQ(cosines(record_ops([&] { first = model.forward({ids}); })), 1);
  // The next forward at the same positions reuses them; another length computes anew.
  EXPECT_EQ(cosines(record_ops([&] { second = model.forward({ids}); })), 0);
  EXPECT_TRUE(at::equal(first[0], second[0]));
  EXPECT_EQ(cosines(record_ops([&] { model.forward({ids.narrow(1, 0, 8)}); })), 1);
  // The same angles as computed afresh: the shorter window's logits are the longer one's
  // first positions (causal attention).
  const at::Tensor shorter = model.forward({ids.narrow(1, 0, 8)})[0];
  EXPECT_TRUE(at::allclose(shorter, first[0].narrow(1, 0, 8), 1e-5, 1e-6));
  // Under InferenceMode the angles are made anew (an inference tensor cannot enter a graph
  // autograd records), and training after it does not take them.
  {
    const c10::InferenceMode inference;
    EXPECT_EQ(cosines(record_ops([&] { model.forward({ids}); })), 1);
  }
  const at::Tensor loss = model.forward({ids})[0].sum();
  loss.backward();
}

}  // namespace
}  // namespace pipetrain::testing
