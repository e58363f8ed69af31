// The core test: pipeline x data parallel training gives the same per-step losses and
// final weights as a plain single-process LibTorch loop over the same data (fp32, CPU).
// Run with 1, 2 and 4 ranks; every pipe x data shape of that world size is covered.
//
// The GPT trains with SGD + momentum, the MLP with Adam: GPT's key bias has an exactly
// zero gradient (softmax ignores a shift shared by all scores), and Adam divides such a
// gradient's rounding noise by its own size, which turns 1e-10 noise into visible steps
// in any two runs that add the micro-batches in a different order.
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <ATen/ATen.h>

#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain {
namespace {

constexpr int kSteps = 5;
constexpr int kMicroBatchSize = 2;
constexpr double kLearningRate = 0.01;
constexpr double kMomentum = 0.9;

struct Case {
  std::string model;  // gpt, gpt-untied, mlp
  int micro_batches;
  int checkpoint_interval;
  double clipping;
};

std::string name(const Case& c) {
  return c.model + " m=" + std::to_string(c.micro_batches) +
         " ckpt=" + std::to_string(c.checkpoint_interval) + " clip=" + std::to_string(c.clipping);
}

models::ModelConfig model_config(const std::string& model) {
  models::ModelConfig config;
  if (model == "mlp") {
    config.type = "mlp";
    config.mlp = {.inputs = 6, .hidden = 12, .outputs = 3, .layers = 3, .task = "regression"};
  } else {
    config.gpt = {.vocab_size = 20,
                  .context = 6,
                  .d_model = 8,
                  .heads = 2,
                  .layers = 2,
                  .dropout = 0.0,
                  .tie_embeddings = model == "gpt"};
  }
  return config;
}

std::shared_ptr<TensorDataset> dataset(const models::ModelConfig& config, int64_t samples) {
  at::manual_seed(42);
  if (config.type == "mlp") {
    return std::make_shared<TensorDataset>(Activation{at::randn({samples, config.mlp.inputs})},
                                           Activation{at::randn({samples, config.mlp.outputs})});
  }
  const auto& g = config.gpt;
  return std::make_shared<TensorDataset>(
      Activation{at::randint(g.vocab_size, {samples, g.context}, at::kLong)},
      Activation{at::randint(g.vocab_size, {samples, g.context}, at::kLong)});
}

TrainingConfig training_config(const Case& c, int stages) {
  TrainingConfig config;
  config.train_micro_batch_size_per_gpu = kMicroBatchSize;
  config.gradient_accumulation_steps = c.micro_batches;
  config.gradient_clipping = c.clipping;
  config.steps_per_print = 1000;
  if (c.model == "mlp") {
    config.optimizer = {"Adam", {{"lr", kLearningRate}}};
  } else {
    config.optimizer = {"SGD", {{"lr", kLearningRate}, {"momentum", kMomentum}}};
  }
  config.pipeline.stages = stages;
  config.pipeline.activation_checkpoint_interval = c.checkpoint_interval;
  config.model = model_config(c.model);
  return config;
}

struct Reference {
  std::vector<double> losses;
  double eval_loss = 0;  // on the batch after the last step, with the final weights
  std::map<std::string, at::Tensor> weights;
};

// One process, one model, the whole global batch per step: what pipetrain must equal.
Reference reference_run(const Case& c, int data_parallel,
                        const std::shared_ptr<TensorDataset>& data) {
  const auto model = models::make_builtin_model(model_config(c.model));
  PipelineModule whole(model.layers, model.loss, {.seed = 1234});
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (c.model == "mlp") {
    optimizer = std::make_unique<torch::optim::Adam>(whole.parameters(),
                                                     torch::optim::AdamOptions(kLearningRate));
  } else {
    optimizer = std::make_unique<torch::optim::SGD>(
        whole.parameters(), torch::optim::SGDOptions(kLearningRate).momentum(kMomentum));
  }
  std::vector<std::unique_ptr<DataLoader>> replicas;
  for (int r = 0; r < data_parallel; ++r) {
    replicas.push_back(std::make_unique<DataLoader>(data, kMicroBatchSize, data_parallel, r));
  }
  auto next_global_batch = [&] {
    std::vector<at::Tensor> inputs, labels;
    for (auto& loader : replicas) {
      for (int j = 0; j < c.micro_batches; ++j) {
        MicroBatch batch = loader->next();
        inputs.push_back(batch.inputs[0]);
        labels.push_back(batch.labels[0]);
      }
    }
    return MicroBatch{{at::cat(inputs)}, {at::cat(labels)}};
  };
  Reference reference;
  for (int step = 0; step < kSteps; ++step) {
    const MicroBatch batch = next_global_batch();
    optimizer->zero_grad();
    const at::Tensor loss = whole.loss(whole.forward(batch.inputs), batch.labels);
    loss.backward();
    if (c.clipping > 0) torch::nn::utils::clip_grad_norm_(whole.parameters(), c.clipping);
    optimizer->step();
    reference.losses.push_back(loss.item<double>());
  }
  for (const auto& [name, tensor] : whole.named_parameters()) {
    reference.weights[name] = tensor.detach();
  }
  at::NoGradGuard no_grad;
  const MicroBatch held_out = next_global_batch();
  reference.eval_loss = whole.loss(whole.forward(held_out.inputs), held_out.labels).item<double>();
  return reference;
}

class EngineEquivalence : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST(EngineEquivalence, EveryGridShapeOfThisWorldMatchesOneProcess) {
  auto world = comm::MpiCommunicator::world();
  std::vector<std::pair<int, int>> shapes;  // (pipe, data)
  for (int pipe : {1, 2, 4}) {
    if (world->size() % pipe == 0 && world->size() / pipe <= 2)
      shapes.emplace_back(pipe, world->size() / pipe);
  }
  ASSERT_FALSE(shapes.empty());
  std::vector<Case> cases;
  for (const std::string model : {"gpt", "gpt-untied", "mlp"}) {
    for (int m : {1, 2, 4, 8}) {
      cases.push_back({model, m, 0, 0.0});
      cases.push_back({model, m, m % 2 ? 1 : 2, m >= 4 ? 0.05 : 0.0});
    }
  }
  for (const auto& [pipe, data] : shapes) {
    auto grid = std::make_shared<Grid>(pipe_data_parallel_topology(pipe, data), world);
    for (const Case& c : cases) {
      SCOPED_TRACE("pipe " + std::to_string(pipe) + " x data " + std::to_string(data) + ": " +
                   name(c));
      const auto samples = dataset(model_config(c.model),
                                   int64_t{kSteps + 1} * kMicroBatchSize * c.micro_batches * data);
      const Reference reference = reference_run(c, data, samples);

      const TrainingConfig config = training_config(c, pipe);
      const auto model = models::make_builtin_model(config.model);
      auto module = std::make_shared<PipelineModule>(
          model.layers, model.loss,
          PipelineModuleOptions{.stages = pipe,
                                .stage_id = grid->stage_id(),
                                .seed = static_cast<uint64_t>(config.seed),
                                .activation_checkpoint_interval = c.checkpoint_interval});
      PipelineEngine engine(module, grid, config);
      DataLoader loader(samples, kMicroBatchSize, data, grid->data_parallel_id());
      for (int step = 0; step < kSteps; ++step) {
        const double loss = engine.train_batch(&loader);
        EXPECT_NEAR(loss, reference.losses[step], 1e-5 * std::abs(reference.losses[step]))
            << "step " << step;
      }
      for (const auto& [name, tensor] : module->named_parameters()) {
        const at::Tensor& expected = reference.weights.at(name);
        EXPECT_TRUE(at::allclose(tensor, expected, 1e-5, 1e-6))
            << name << " differs by " << (tensor - expected).abs().max().item<double>();
      }
      const auto evaluation = engine.eval_batch(&loader, /*return_outputs=*/true);
      EXPECT_NEAR(evaluation.loss, reference.eval_loss, 1e-5 * std::abs(reference.eval_loss));
      EXPECT_EQ(evaluation.outputs.size(),
                grid->is_last_stage() ? static_cast<std::size_t>(c.micro_batches) : 0u);
      EXPECT_LE(engine.peak_live_activations(),
                std::max(2, std::min(pipe - grid->stage_id(), c.micro_batches)));
    }
  }
}

}  // namespace
}  // namespace pipetrain
