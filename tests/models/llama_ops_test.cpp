// The LLaMA computes its rotary angles once per forward for all of a stage's blocks (as
// transformers' LlamaModel does), not once per block, and again per decode step.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/kv_cache.h"
#include "models/llama/llama.h"
#include "op_recorder.h"
#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::testing {
namespace {

int64_t cosines(const std::vector<RecordedOp>& ops) {
  return std::count_if(ops.begin(), ops.end(),
                       [](const RecordedOp& op) { return op.name == "aten::cos"; });
}

// Three grouped-query blocks.
models::LlamaConfig tiny_llama() {
  return {.vocab_size = 64,
          .context = 16,
          .d_model = 32,
          .heads = 4,
          .num_key_value_heads = 2,
          .intermediate_size = 48,
          .layers = 3};
}

TEST(LlamaOps, RotaryAnglesOncePerForwardForEveryBlock) {
  const models::LlamaConfig config = tiny_llama();
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

// Generation's rows (each over its own KV cache) share one rotation per decode step too,
// each row rotated at its own positions: the rows' logits are each row's alone.
TEST(LlamaOps, RotaryAnglesOncePerDecodeStepForRowsAtTheirOwnPositions) {
  const models::LlamaConfig config = tiny_llama();
  module::PipelineModule model(models::llama_layers(config), models::gpt_loss(), {});
  const c10::InferenceMode inference;
  // Two prompts of 3 and 6 tokens, prefilled alone, then one decode step each, alone and
  // as two rows.
  const at::Tensor ids = at::randint(config.vocab_size, {2, 7}, at::kLong);
  models::KvCache alone[2], together[2];
  const int64_t lengths[2] = {3, 6};
  at::Tensor expected[2];
  for (int r = 0; r < 2; ++r) {
    for (models::KvCache* cache : {&alone[r], &together[r]}) {
      const models::UsingKvCache using_cache(cache);
      model.forward({ids[r].narrow(0, 0, lengths[r]).unsqueeze(0)});
      cache->advance(lengths[r]);
    }
    const models::UsingKvCache using_cache(&alone[r]);
    expected[r] = model.forward({ids[r].narrow(0, lengths[r], 1).unsqueeze(0)})[0];
  }
  const at::Tensor step =
      at::stack({ids[0].narrow(0, lengths[0], 1), ids[1].narrow(0, lengths[1], 1)});
  const models::UsingKvCache using_cache(models::KvRows({&together[0], &together[1]}));
  module::Activation rows;
  EXPECT_EQ(cosines(record_ops([&] { rows = model.forward({step}); })), 1);
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(at::allclose(rows[0][r], expected[r][0], 1e-5, 1e-6)) << r;
}

}  // namespace
}  // namespace pipetrain::testing
