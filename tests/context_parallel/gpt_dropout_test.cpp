// The GPT with dropout under context parallelism (the world as one context group, 2 and 4
// ranks; at 4 ranks also context 2 x model 2, with and without sequence parallelism) against
// the whole sequence on one rank: one forward and backward in training from the same
// generator state must give the same loss (the context ranks' mean) and the same gradients
// (the context ranks' mean of the shards joined), the embedding's, residual and attention
// dropout included.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <string>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/tensor_parallel/shard.h"
#include "pipetrain/topology/grid.h"
#include "pipetrain/topology/process_topology.h"

namespace pipetrain::context_parallel {
namespace {

struct GptPass {
  double loss = 0;
  std::map<std::string, at::Tensor> gradients;
};

// One training forward and backward of the whole model on one stage, its tensors split over
// `model` and the context over `context`; the loss and gradients (shards joined) averaged
// over the context group (as the engine reduces them).
GptPass gpt_pass(const models::ModelConfig& config, const tensor_parallel::Group& model,
                 const Group& context, uint64_t dropout_seed) {
  const models::BuiltinModel built = models::make_builtin_model(config, model, context);
  module::PipelineModule module(
      built.layers, built.loss,
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
  const auto layouts = module.shard_layouts();
  for (const auto& [name, parameter] : module.named_parameters()) {
    const auto layout = layouts.find(name);
    at::Tensor grad = layout == layouts.end() || !model.parallel()
                          ? parameter.grad().clone()
                          : tensor_parallel::join_shards(model.comm->all_gather(parameter.grad()),
                                                         layout->second);
    if (context.parallel()) context.comm->all_reduce(grad, comm::ReduceOp::kSum);
    pass.gradients[name] = grad / context.size();
  }
  return pass;
}

GptPass gpt_pass(const models::ModelConfig& config, const Group& context, uint64_t dropout_seed) {
  return gpt_pass(config, {}, context, dropout_seed);
}

void expect_same_pass(const GptPass& split, const GptPass& whole) {
  EXPECT_NEAR(split.loss, whole.loss, 1e-6);
  ASSERT_EQ(split.gradients.size(), whole.gradients.size());
  for (const auto& [name, grad] : whole.gradients) {
    ASSERT_TRUE(split.gradients.count(name)) << name;
    const at::Tensor& got = split.gradients.at(name);
    ASSERT_EQ(got.sizes(), grad.sizes()) << name;
    EXPECT_TRUE(at::allclose(got, grad, 1e-5, 1e-6))
        << name << " differs by " << (got - grad).abs().max().item<double>();
  }
}

models::ModelConfig gpt_with_dropout(double dropout) {
  models::ModelConfig config;
  config.type = models::family("gpt");
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
  expect_same_pass(split, whole);
  // Guards the comparison: dropout draws differ with the generator's state, and change the
  // loss (so the masks above were drawn and applied alike, not skipped).
  EXPECT_GT(std::abs(gpt_pass(config, world, 7).loss - split.loss), 1e-4);
  EXPECT_GT(std::abs(gpt_pass(gpt_with_dropout(0), world, 99).loss - split.loss), 1e-4);
}

TEST(ContextParallelGpt, WithDropoutAndTensorParallelismGivesTheWholeSequencesLossAndGradients) {
  const auto world = comm::MpiCommunicator::world();
  if (world->size() != 4) GTEST_SKIP() << "context 2 x model 2 takes 4 ranks";
  static const topology::Grid grid(topology::pipe_data_context_model_topology(1, 1, 2, 2), world);
  const Group context{grid.context_comm()};
  const models::ModelConfig config = gpt_with_dropout(0.2);
  const GptPass whole = gpt_pass(config, Group{}, 99);
  for (const bool sequence_parallel : {false, true}) {
    SCOPED_TRACE(sequence_parallel ? "sequence parallel" : "tensor parallel");
    const tensor_parallel::Group model{grid.tensor_comm(), sequence_parallel};
    const GptPass split = gpt_pass(config, model, context, 99);
    expect_same_pass(split, whole);
    // The comparison can fail: another draw changes the loss.
    EXPECT_GT(std::abs(gpt_pass(config, model, context, 7).loss - split.loss), 1e-4);
  }
}

}  // namespace
}  // namespace pipetrain::context_parallel
