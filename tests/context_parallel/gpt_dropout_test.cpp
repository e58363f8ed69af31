// The GPT with dropout under context parallelism (the world as one context group, 2 and 4
// ranks) against the whole sequence on one rank: one forward and backward in training from
// the same generator state must give the same loss (the ranks' mean) and the same
// gradients (the ranks' mean), the embedding's, residual and attention dropout included.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::context_parallel {
namespace {

struct GptPass {
  double loss = 0;
  std::map<std::string, at::Tensor> gradients;
};

// One training forward and backward of the whole model on one stage, the context split
// over `context`; the loss and gradients averaged over it (as the engine reduces them).
GptPass gpt_pass(const models::ModelConfig& config, const Group& context, uint64_t dropout_seed) {
  const models::BuiltinModel model = models::make_builtin_model(config, {}, context);
  module::PipelineModule module(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = 1, .stage_id = 0, .seed = 5});
  module.train(true);
  at::manual_seed(21);
  const at::Tensor ids = at::randint(config.gpt.vocab_size, {2, config.gpt.context}, at::kLong);
  at::manual_seed(dropout_seed);  // every rank draws alike, as a context group's ranks do
  at::Tensor loss = module.loss(module.forward({ids}), {ids.roll(-1, 1)});
  loss.backward();
  GptPass pass;
  loss = loss.detach().clone();
  if (context.parallel()) context.comm->all_reduce(loss, comm::ReduceOp::kSum);
  pass.loss = loss.item<double>() / context.size();
  for (const auto& [name, parameter] : module.named_parameters()) {
    at::Tensor grad = parameter.grad().clone();
    if (context.parallel()) context.comm->all_reduce(grad, comm::ReduceOp::kSum);
    pass.gradients[name] = grad / context.size();
  }
  return pass;
}

models::ModelConfig gpt_with_dropout(double dropout) {
  models::ModelConfig config;
  config.type = "gpt";
  config.gpt = {.vocab_size = 20,
                .context = 16,
                .d_model = 8,
                .heads = 2,
                .layers = 2,
                .dropout = dropout,
                .tie_embeddings = true};
  return config;
}

TEST(ContextParallelGpt, WithDropoutGivesTheWholeSequencesLossAndGradients) {
  const Group world{comm::MpiCommunicator::world()};
  const models::ModelConfig config = gpt_with_dropout(0.2);
  const GptPass whole = gpt_pass(config, Group{}, 99);
  const GptPass split = gpt_pass(config, world, 99);
  EXPECT_NEAR(split.loss, whole.loss, 1e-6);
  ASSERT_EQ(split.gradients.size(), whole.gradients.size());
  for (const auto& [name, grad] : whole.gradients) {
    ASSERT_TRUE(split.gradients.count(name)) << name;
    const at::Tensor& got = split.gradients.at(name);
    EXPECT_TRUE(at::allclose(got, grad, 1e-5, 1e-6))
        << name << " differs by " << (got - grad).abs().max().item<double>();
  }
  // Guards the comparison: dropout draws differ with the generator's state, and change the
  // loss (so the masks above were drawn and applied alike, not skipped).
  EXPECT_GT(std::abs(gpt_pass(config, world, 7).loss - split.loss), 1e-4);
  EXPECT_GT(std::abs(gpt_pass(gpt_with_dropout(0), world, 99).loss - split.loss), 1e-4);
}

}  // namespace
}  // namespace pipetrain::context_parallel
