// A model on one stage against the same model split into 2 and 4 stages, run stage by
// stage in one process: identical initial weights, outputs and gradients.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <map>

#include "pipetrain/io/errors.h"
#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/models/mlp/mlp.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::module {
namespace {

using Named = std::map<std::string, at::Tensor>;

models::GptConfig small_gpt() {
  return {.vocab_size = 32, .context = 8, .d_model = 16, .heads = 2, .layers = 4, .dropout = 0.0};
}

struct SplitRun {
  at::Tensor loss;
  at::Tensor logits;
  Named weights;  // per name; tied owners must agree
  Named grads;    // per name, summed over owners (what ReduceTiedGrads computes)
};

SplitRun run_split(int stages, const std::string& method, const at::Tensor& ids,
                   const at::Tensor& labels) {
  std::vector<std::unique_ptr<PipelineModule>> parts;
  for (int s = 0; s < stages; ++s) {
    parts.push_back(std::make_unique<PipelineModule>(
        models::gpt_layers(small_gpt()), models::gpt_loss(),
        PipelineModuleOptions{
            .stages = stages, .stage_id = s, .partition_method = method, .seed = 7}));
  }
  Activation x{ids};
  for (auto& part : parts) x = part->forward(x);
  SplitRun run;
  run.logits = x[0];
  run.loss = parts.back()->loss(x, {labels});
  run.loss.backward();
  for (auto& part : parts) {
    for (const auto& [name, tensor] : part->named_parameters()) {
      if (run.weights.count(name)) {
        EXPECT_TRUE(at::equal(run.weights[name], tensor)) << "tied owners differ in " << name;
      } else {
        run.weights[name] = tensor.detach().clone();
      }
      const at::Tensor grad = tensor.grad().defined() ? tensor.grad() : at::zeros_like(tensor);
      run.grads[name] = run.grads.count(name) ? run.grads[name] + grad : grad.clone();
    }
  }
  return run;
}

TEST(PipelineModule, SplittingChangesNothing) {
  at::manual_seed(3);
  const at::Tensor ids = at::randint(32, {2, 8}, at::kLong);
  const at::Tensor labels = at::randint(32, {2, 8}, at::kLong);
  const SplitRun whole = run_split(1, "parameters", ids, labels);
  for (int stages : {2, 4}) {
    for (const std::string method : {"parameters", "uniform", "type:GptBlock"}) {
      SCOPED_TRACE(std::to_string(stages) + " stages, " + method);
      const SplitRun split = run_split(stages, method, ids, labels);
      EXPECT_TRUE(at::equal(split.logits, whole.logits));
      EXPECT_TRUE(at::equal(split.loss, whole.loss));
      ASSERT_EQ(split.weights.size(), whole.weights.size());
      for (const auto& [name, weight] : whole.weights) {
        EXPECT_TRUE(at::equal(split.weights.at(name), weight)) << name;
        EXPECT_TRUE(at::allclose(split.grads.at(name), whole.grads.at(name), 1e-6, 1e-7)) << name;
      }
    }
  }
}

TEST(PipelineModule, BuildsOnlyItsOwnLayersAndKnowsTheTiedOwners) {
  const PipelineModule first(models::gpt_layers(small_gpt()), models::gpt_loss(),
                             {.stages = 2, .stage_id = 0, .partition_method = "uniform"});
  const PipelineModule last(models::gpt_layers(small_gpt()), models::gpt_loss(),
                            {.stages = 2, .stage_id = 1, .partition_method = "uniform"});
  EXPECT_EQ(first.parts(), (Partition{0, 4, 7}));
  EXPECT_EQ(first.layer_range(), (std::pair<int, int>{0, 4}));
  EXPECT_EQ(last.layer_range(), (std::pair<int, int>{4, 7}));
  EXPECT_EQ(first.tie_keys(), std::vector<std::string>{"embed"});
  EXPECT_EQ(last.tie_keys(), std::vector<std::string>{"embed"});
  EXPECT_EQ(first.tie_owner_stages("embed"), (std::vector<int>{0, 1}));
  ASSERT_EQ(first.tied_parameters("embed").size(), 1u);
  EXPECT_TRUE(at::equal(first.tied_parameters("embed")[0], last.tied_parameters("embed")[0]));
  // Stage 0 holds no final LayerNorm, stage 1 no attention of block 0.
  for (const auto& [name, tensor] : first.named_parameters())
    EXPECT_NE(name.rfind("5.", 0), 0u) << name;
  for (const auto& [name, tensor] : last.named_parameters())
    EXPECT_NE(name.rfind("1.", 0), 0u) << name;
}

TEST(PipelineModule, InterleavedChunksOwnEveryPthVirtualStage) {
  const PipelineModule stage1(
      models::mlp_layers({.layers = 4}), models::mlp_loss({}),
      {.stages = 2, .stage_id = 1, .chunks = 2, .partition_method = "uniform"});
  // 7 layers (4 Linear, 3 ReLU) over 4 virtual stages: [0,2) [2,4) [4,6) [6,7).
  EXPECT_EQ(stage1.layer_range(0), (std::pair<int, int>{2, 4}));
  EXPECT_EQ(stage1.layer_range(1), (std::pair<int, int>{6, 7}));
}

TEST(PipelineModule, MoreStagesThanLayersIsAnInputError) {
  EXPECT_THROW(PipelineModule(models::mlp_layers({.layers = 2}), models::mlp_loss({}),
                              {.stages = 4, .stage_id = 0}),
               io::InputError);
}

TEST(PipelineModule, ProfilePartitioningMeasuresEveryLayer) {
  const auto specs = models::mlp_layers({.inputs = 8, .hidden = 256, .outputs = 1, .layers = 3});
  const PipelineModule module(specs, models::mlp_loss({}),
                              {.stages = 2,
                               .stage_id = 0,
                               .partition_method = "profile",
                               .profile_sample = {at::randn({32, 8})}});
  EXPECT_EQ(module.parts().size(), 3u);
  EXPECT_GE(module.parts()[1], 1);
  EXPECT_LE(module.parts()[1], 4);
  EXPECT_THROW(
      PipelineModule(specs, models::mlp_loss({}), {.stages = 2, .partition_method = "profile"}),
      io::InputError);
}

}  // namespace
}  // namespace pipetrain::module
