// The core test: pipeline x data parallel training gives the same per-step losses and
// final weights as a plain single-process LibTorch loop over the same data (fp32, CPU).
// Run with 1, 2 and 4 ranks; every pipe x data shape of that world size is covered.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "reference_training.h"

namespace pipetrain {
namespace {

using namespace pipetrain::testing;

// Trains every case under `schedule` on every pipe x data shape of this world and compares
// with one process; `peak_bound(pipe, stage, micro-batches)` bounds the live activations.
void expect_every_shape_matches_one_process(PipelineSchedule schedule,
                                            int (*peak_bound)(int, int, int)) {
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
      const auto samples = dataset(c, data);
      const Reference reference = reference_run(c, data, samples);

      TrainingConfig config = training_config(c, pipe);
      config.pipeline.schedule = schedule;
      const auto model = models::make_builtin_model(model_config(c.model));
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
                peak_bound(pipe, grid->stage_id(), c.micro_batches));
    }
  }
}

TEST(EngineEquivalence, EveryGridShapeOfThisWorldMatchesOneProcess) {
  // 1F1B holds at most the stages ahead of this one (DeepSpeed keeps at least two buffers).
  expect_every_shape_matches_one_process(PipelineSchedule::k1F1B, [](int pipe, int stage, int m) {
    return std::max(2, std::min(pipe - stage, m));
  });
}

TEST(EngineEquivalence, GPipeMatchesOneProcessToo) {
  // GPipe runs every forward before any backward: all micro-batches are live at once.
  expect_every_shape_matches_one_process(PipelineSchedule::kGpipe,
                                         [](int, int, int m) { return m; });
}

}  // namespace
}  // namespace pipetrain
