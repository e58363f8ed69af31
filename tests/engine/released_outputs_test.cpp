// A stage frees the values of each activation it has sent (Megatron's
// deallocate_output_tensor) and backward still runs from the graph they belonged to: under
// GPipe, where every forward runs before any backward, the first stage's memory holds no
// more than a few of its sent outputs at once, not all of them.
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "device/cpu_memory.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::testing {
namespace {

constexpr int64_t kReleasedMicroBatch = 2;
constexpr int kReleasedMicroBatches = 8;
constexpr int64_t kWide = 16384;  // the first stage's output features

TEST(ReleasedOutputs, FirstStageHoldsFewOfItsSentActivations) {
  auto world = comm::MpiCommunicator::world();
  if (world->size() != 2) GTEST_SKIP() << "a two-rank test";
  device::count_cpu_memory();
  auto grid = std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(2, 1), world);
  std::vector<module::LayerSpec> layers = {
      module::module_layer<torch::nn::Linear>("Linear", [] { return torch::nn::Linear(1, kWide); }),
      module::module_layer<torch::nn::Linear>("Linear", [] { return torch::nn::Linear(kWide, 1); }),
  };
  auto module = std::make_shared<module::PipelineModule>(
      layers,
      [](const module::Activation& out, const module::Activation& y) {
        return at::mse_loss(out[0], y[0]);
      },
      module::PipelineModuleOptions{
          .stages = 2, .stage_id = grid->stage_id(), .partition_method = "uniform"});
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = kReleasedMicroBatch;
  config.gradient_accumulation_steps = kReleasedMicroBatches;
  config.pipeline.schedule.kind = schedule::Kind::kGpipe;
  config.optimizer = {"SGD", {{"lr", 1e-5}}};
  engine::PipelineEngine engine(module, grid, config);
  engine.set_progress_report(false);
  const int64_t samples = kReleasedMicroBatch * kReleasedMicroBatches;
  auto data = std::make_shared<data::TensorDataset>(module::Activation{at::randn({samples, 1})},
                                                    module::Activation{at::randn({samples, 1})});
  data::RepeatingLoader loader(std::make_unique<data::DataLoader>(data, kReleasedMicroBatch, 1, 0));
  engine.train_batch(&loader);  // gradients and buffers made once
  const at::Tensor weight_before = module->parameters().front().detach().clone();
  const int64_t held = device::cpu_memory()->allocated;
  device::reset_cpu_peak();
  const double first = engine.train_batch(&loader);
  const double second = engine.train_batch(&loader);
  if (grid->stage_id() != 0) return;
  const int64_t output_bytes = kReleasedMicroBatch * kWide * 4;
  const int64_t step_peak = device::cpu_memory()->peak_allocated - held;
  // Kept, the 8 outputs alone would take 8 x 128 KiB; released, one output, one received
  // gradient and the layer's own gradients' worth are live at a time.
  EXPECT_LT(step_peak, 4 * output_bytes) << "peak above what was held: " << step_peak << " bytes";
  // Backward ran from the released outputs' graph: the first stage's weights moved.
  EXPECT_FALSE(at::equal(weight_before, module->parameters().front()));
  EXPECT_LT(second, first);
}

}  // namespace
}  // namespace pipetrain::testing
