// Megatron's sequence parallelism against the whole sequence: the collectives alone, and the
// GPT (with dropout) and the LLaMA built whole on one rank and with the sequence split over
// a model group of two. Outputs, the loss and every parameter's gradient (each rank's
// shard of a split one, the whole of a replicated one) must agree. Runs inside the
// equivalence program, on the model axis of the grid.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "context_parallel/whole_sequences.h"
#include "model_group.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/shard.h"
#include "tensor_parallel/sequence_parallel.h"

namespace pipetrain::tensor_parallel {
namespace {

Group sequence_group_of_two() {
  Group group = testing::model_group_of_two();
  group.sequence_parallel = true;
  return group;
}

void expect_near(const at::Tensor& got, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, expected, 1e-5, 1e-6))
      << what << " differs by " << (got - expected).abs().max().item<double>();
}

TEST(SequenceParallel, GatherAndReduceScatterAlongTheSequenceAndTheirGradients) {
  const Group group = sequence_group_of_two();
  ASSERT_TRUE(splits_sequence(group));
  at::manual_seed(3);
  const at::Tensor whole = at::randn({2, 6, 4});        // the same on both ranks
  const at::Tensor upstream = at::randn({2, 6, 4});     // likewise
  const SequenceSlice mine = local_sequence(6, group);  // 3 positions each
  EXPECT_EQ(mine.first, 3 * group.rank());
  EXPECT_EQ(mine.length, 3);

  // Entering the parallel region gathers the slices; its backward sums the whole
  // gradient over the group and keeps this rank's slice.
  const at::Tensor slice = whole.narrow(1, mine.first, 3).clone().requires_grad_(true);
  const at::Tensor gathered = enter_parallel_region(slice, group);
  expect_near(gathered, whole, "gathered sequence");
  (gathered * upstream).sum().backward();
  expect_near(slice.grad(), 2 * upstream.narrow(1, mine.first, 3), "gradient of the gather");

  // Leaving it sums the group's partial results and keeps this rank's slice; its backward
  // gathers the slices' gradients.
  const at::Tensor partial = (whole * (group.rank() + 1)).requires_grad_(true);
  const at::Tensor summed = leave_parallel_region(partial, group);
  expect_near(summed, 3 * whole.narrow(1, mine.first, 3), "reduce-scattered slice");
  (summed * upstream.narrow(1, mine.first, 3)).sum().backward();
  expect_near(partial.grad(), upstream, "gradient of the reduce-scatter");

  // A sequence that does not split is refused, naming both sizes.
  EXPECT_THROW(local_sequence(5, group), std::invalid_argument);
  {
    const context_parallel::WholeSequences whole_sequences;  // generation: no split
    EXPECT_FALSE(splits_sequence(group));
    EXPECT_EQ(local_sequence(5, group).length, 5);
  }
  EXPECT_TRUE(splits_sequence(group));
}

TEST(SequenceParallel, DropoutOfASliceIsThatSliceOfTheWholeSequencesDropout) {
  const Group group = sequence_group_of_two();
  const at::Tensor x = at::ones({2, 8, 3});
  at::manual_seed(11);
  const at::Tensor whole = at::dropout(x, 0.3, /*train=*/true);
  at::manual_seed(11);
  const at::Tensor slice = sequence_dropout(x.narrow(1, 4 * group.rank(), 4), 0.3, true, group);
  EXPECT_TRUE(at::equal(slice, whole.narrow(1, 4 * group.rank(), 4)));
  EXPECT_GT(whole.eq(0).sum().item<int64_t>(), 0);  // it drops something
  EXPECT_TRUE(at::equal(sequence_dropout(x, 0.3, /*training=*/false, group), x));
}

struct Pass {
  at::Tensor loss;
  std::map<std::string, at::Tensor> gradients;  // whole: shards joined over the group
};

// One forward and backward of the whole model (one stage, every layer) under `group`.
Pass forward_and_backward(const models::ModelConfig& config, const Group& group) {
  const models::BuiltinModel model = models::make_builtin_model(config, group);
  module::PipelineModule module(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = 1, .stage_id = 0, .seed = 5});
  module.train(true);
  const int64_t context = model.tokens()->context;
  at::manual_seed(21);
  const at::Tensor ids = at::randint(
      config.type == models::family("gpt") ? config.gpt.vocab_size : config.llama.vocab_size,
      {2, context}, at::kLong);
  const at::Tensor labels = ids.roll(-1, 1);
  at::manual_seed(99);  // dropout draws alike in both runs
  Pass pass;
  pass.loss = module.loss(module.forward({ids}), {labels});
  pass.loss.backward();
  const auto layouts = module.shard_layouts();
  for (const auto& [name, parameter] : module.named_parameters()) {
    const auto layout = layouts.find(name);
    const at::Tensor grad = parameter.grad();
    pass.gradients[name] = layout == layouts.end() || !group.parallel()
                               ? grad
                               : join_shards(group.comm->all_gather(grad), layout->second);
  }
  return pass;
}

void expect_same_training_signal(const models::ModelConfig& config) {
  const Pass whole = forward_and_backward(config, Group{});
  const Pass split = forward_and_backward(config, sequence_group_of_two());
  EXPECT_NEAR(split.loss.item<double>(), whole.loss.item<double>(), 1e-6);
  ASSERT_EQ(split.gradients.size(), whole.gradients.size());
  for (const auto& [name, grad] : whole.gradients) {
    ASSERT_TRUE(split.gradients.count(name)) << name;
    expect_near(split.gradients.at(name), grad, name);
  }
}

TEST(SequenceParallel, GptWithDropoutGivesTheWholeSequencesLossAndGradients) {
  models::ModelConfig config;
  config.type = models::family("gpt");
  config.gpt = {.vocab_size = 20,
                .context = 6,
                .d_model = 8,
                .heads = 2,
                .layers = 2,
                .dropout = 0.1,
                .tie_embeddings = true};
  expect_same_training_signal(config);
  config.gpt.tie_embeddings = false;
  expect_same_training_signal(config);
}

TEST(SequenceParallel, LlamaGivesTheWholeSequencesLossAndGradients) {
  models::ModelConfig config;
  config.type = models::family("llama");
  config.llama = {.vocab_size = 20,
                  .context = 6,
                  .d_model = 8,
                  .heads = 4,
                  .num_key_value_heads = 2,
                  .intermediate_size = 12,
                  .layers = 2};
  expect_same_training_signal(config);
}

TEST(SequenceParallel, AContextThatDoesNotSplitIsRefusedNamingTheKey) {
  models::ModelConfig config;
  config.type = models::family("gpt");
  config.gpt = {.vocab_size = 20, .context = 7, .d_model = 8, .heads = 2, .layers = 1};
  try {
    models::make_builtin_model(config, sequence_group_of_two());
    FAIL() << "a context of 7 split over 2 ranks";
  } catch (const io::InputError& e) {
    EXPECT_STREQ(e.what(),
                 "model.context (7) must be divisible by the model-parallel size under "
                 "sequence_parallel (2)");
  }
}

}  // namespace
}  // namespace pipetrain::tensor_parallel
