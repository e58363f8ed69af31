// ZeRO stage 3's memory: what a rank holds between steps (parameters, gradients, optimizer
// state, masters) against stage 0's, by the counting CPU allocator; and how many layers are
// gathered at once. Run at 2 and 4 ranks (pipe 1 x data 2 and 4, pipe 2 x data 2).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>

#include "data_parallel/layer_gathering.h"
#include "device/cpu_memory.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace pipetrain::engine {
namespace {

constexpr int kMicroBatches = 4;
constexpr int kMicroBatchSize = 2;
constexpr int kContext = 16;

// An untied GPT whose model state dwarfs its activations: 8 blocks of d 64, vocabulary 256.
models::ModelConfig model_config() {
  models::ModelConfig config;
  config.gpt = {.vocab_size = 256,
                .context = kContext,
                .d_model = 64,
                .heads = 4,
                .layers = 8,
                .dropout = 0.0,
                .tie_embeddings = false};
  return config;
}

std::shared_ptr<data::TensorDataset> dataset(int data) {
  const int64_t samples = int64_t{4} * kMicroBatchSize * kMicroBatches * data;
  at::manual_seed(42);
  return std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(256, {samples, kContext}, at::kLong)},
      module::Activation{at::randint(256, {samples, kContext}, at::kLong)});
}

struct Setting {
  int stage = 0;
  int prefetch = 1;
  bool reshard = true;
  int checkpoint_interval = 0;
};

struct Measured {
  int64_t at_rest = 0;    // CPU bytes held between steps, beyond what was held before
  int peak_gathered = 0;  // stage 3: the most buckets gathered at once
  int buckets = 0;
  int64_t parameter_bytes = 0;  // of this rank's stage, whole
};

// Builds the model and engine at `setting` on `grid`, trains 3 steps.
Measured train(const std::shared_ptr<topology::Grid>& grid, const Setting& setting) {
  device::count_cpu_memory();  // once per process: counts what is allocated from now on
  const auto samples = dataset(grid->data_parallel_size());
  const int64_t before = device::cpu_memory()->allocated;
  Measured measured;
  {
    const auto model = models::make_builtin_model(model_config());
    auto module = std::make_shared<module::PipelineModule>(
        model.layers, model.loss,
        module::PipelineModuleOptions{
            .stages = grid->pipe_parallel_size(),
            .stage_id = grid->stage_id(),
            .activation_checkpoint_interval = setting.checkpoint_interval});
    TrainingConfig config;
    config.train_micro_batch_size_per_gpu = kMicroBatchSize;
    config.gradient_accumulation_steps = kMicroBatches;
    config.steps_per_print = 1000;
    config.optimizer = {"Adam", {{"lr", 1e-3}}};
    config.pipeline.activation_checkpoint_interval = setting.checkpoint_interval;
    config.zero.stage = setting.stage;
    config.zero.prefetch = setting.prefetch;
    config.zero.reshard_after_forward = setting.reshard;
    PipelineEngine engine(module, grid, config);
    for (const auto& p : module->parameters()) measured.parameter_bytes += p.numel() * 4;
    data::DataLoader loader(samples, kMicroBatchSize, grid->data_parallel_size(),
                            grid->data_parallel_id());
    for (int step = 0; step < 3; ++step) engine.train_batch(&loader);
    measured.at_rest = device::cpu_memory()->allocated - before;
    if (const data_parallel::LayerGathering* gathering = engine.layer_gathering()) {
      EXPECT_EQ(gathering->parameters().gathered_count(), 0) << "gathered between steps";
      measured.peak_gathered = gathering->parameters().peak_gathered();
      measured.buckets = gathering->parameters().buckets();
    }
  }
  return measured;
}

std::vector<std::shared_ptr<topology::Grid>> grids() {
  auto world = comm::MpiCommunicator::world();
  std::vector<std::shared_ptr<topology::Grid>> found;
  for (int pipe : {1, 2}) {
    if (world->size() % pipe == 0 && world->size() / pipe >= 2) {
      found.push_back(std::make_shared<topology::Grid>(
          topology::pipe_data_parallel_topology(pipe, world->size() / pipe), world));
    }
  }
  return found;
}

// Parameters, gradients, optimizer state and masters held between steps: stage 3's at most
// stage 0's divided by the data-parallel size, + 10 %; and between 0.9 and 1.2 times its
// pieces of the parameters and Adam's two moments (fp32: the masters are the pieces; no
// gradient is kept after a step; the rest is what the last micro-batches left in the pipe
// buffers, up to 11 % on the stage with the LM head). Stage 0 also keeps its all-reduce
// buckets, as large as the gradients, so stage 3 comes out near 0.81 of stage 0's / d.
TEST(ZeroStage3, HoldsItsShareOfTheModelState) {
  for (const auto& grid : grids()) {
    const int data = grid->data_parallel_size();
    SCOPED_TRACE("pipe " + std::to_string(grid->pipe_parallel_size()) + " x data " +
                 std::to_string(data));
    const Measured whole = train(grid, {.stage = 0});
    const Measured sharded = train(grid, {.stage = 3});
    const double share = static_cast<double>(sharded.at_rest) / (whole.at_rest / double(data));
    if (grid->global_rank() == 0) {
      std::printf("pipe %d x data %d: stage 0 holds %lld bytes, stage 3 %lld (%.3f of 1/%d)\n",
                  grid->pipe_parallel_size(), data, static_cast<long long>(whole.at_rest),
                  static_cast<long long>(sharded.at_rest), share, data);
    }
    EXPECT_GT(whole.at_rest, 0);
    EXPECT_LE(share, 1.10);
    const double pieces = 3.0 * sharded.parameter_bytes / data;
    EXPECT_LE(sharded.at_rest, 1.20 * pieces);
    EXPECT_GE(sharded.at_rest, 0.90 * pieces);
  }
}

// With resharding after forward, at most prefetch + 1 layers (one bucket each, untied) are
// gathered at any moment, activation checkpointing's recomputation included; without it,
// every layer stays gathered through the step.
TEST(ZeroStage3, GathersAtMostPrefetchPlusOneLayers) {
  for (const auto& grid : grids()) {
    SCOPED_TRACE("pipe " + std::to_string(grid->pipe_parallel_size()) + " x data " +
                 std::to_string(grid->data_parallel_size()));
    for (int checkpoint : {0, 2}) {
      for (int prefetch : {0, 1, 2}) {
        SCOPED_TRACE("prefetch " + std::to_string(prefetch) + ", checkpoint interval " +
                     std::to_string(checkpoint));
        const Measured m = train(
            grid,
            {.stage = 3, .prefetch = prefetch, .reshard = true, .checkpoint_interval = checkpoint});
        EXPECT_LE(m.peak_gathered, prefetch + 1);
        EXPECT_GE(m.peak_gathered, std::min(prefetch + 1, m.buckets));
      }
    }
    const Measured kept = train(grid, {.stage = 3, .prefetch = 1, .reshard = false});
    EXPECT_EQ(kept.peak_gathered, kept.buckets);
    EXPECT_GT(kept.buckets, 2);
  }
}

}  // namespace
}  // namespace pipetrain::engine
