// Tensor parallelism side by side in one run of four ranks (one intra-op thread each):
//   pipetrain launch -n 4 -- build/bench/tensor_parallel_bench
// The engine benchmark's GPT (d=128, 4 blocks, 8 micro-batches of 4 x 64 tokens) on
// pipe 2 x data 2, and on pipe 2 x model 2 with and without partitioned stage transfers:
// samples/s, bytes each rank moves between stages per step, and how long the stages wait
// in transfers. On a machine with fewer cores than ranks the times say more about the
// oversubscription than about the layout; the byte counts do not depend on it.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

constexpr int kMicroBatches = 8;
constexpr int64_t kMicroBatchSize = 4;
constexpr int kWarmupSteps = 2;
constexpr int kSteps = 3;

struct Figures {
  double samples_per_second = 0;
  int64_t bytes_per_step = 0;   // this rank, sent and received
  double transfer_seconds = 0;  // this rank, per step
};

Figures measure(const std::shared_ptr<comm::MpiCommunicator>& world, int data, int model,
                bool partitioned) {
  const models::GptConfig gpt{
      .vocab_size = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 4};
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_model_data_parallel_topology(2, data, model), world);
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = kMicroBatchSize;
  config.gradient_accumulation_steps = kMicroBatches;
  config.steps_per_print = 1 << 30;
  config.pipeline.partitioned_transfers = partitioned;
  models::ModelConfig model_config;
  model_config.gpt = gpt;
  const auto built =
      models::make_builtin_model(model_config, tensor_parallel::Group{grid->tensor_comm()});
  auto module = std::make_shared<module::PipelineModule>(
      built.layers, built.loss,
      module::PipelineModuleOptions{.stages = 2, .stage_id = grid->stage_id()});
  engine::PipelineEngine engine(module, grid, config);
  at::manual_seed(3);
  const int64_t samples = kMicroBatchSize * kMicroBatches * data;
  auto dataset = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(256, {samples, 64}, at::kLong)},
      module::Activation{at::randint(256, {samples, 64}, at::kLong)});
  data::RepeatingLoader loader(
      std::make_unique<data::DataLoader>(dataset, kMicroBatchSize, data, grid->data_parallel_id()));
  for (int i = 0; i < kWarmupSteps; ++i) engine.train_batch(&loader);
  const int64_t bytes_before = engine.p2p_bytes();
  using schedule::OpKind;
  auto transfer_seconds = [&] {
    double total = 0;
    for (auto kind :
         {OpKind::kSendActivation, OpKind::kRecvActivation, OpKind::kSendGrad, OpKind::kRecvGrad})
      total += engine.timers().seconds(kind);
    return total;
  };
  const double transfers_before = transfer_seconds();
  world->barrier();
  const auto start = Clock::now();
  for (int i = 0; i < kSteps; ++i) engine.train_batch(&loader);
  world->barrier();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / kSteps;
  return {samples / seconds, (engine.p2p_bytes() - bytes_before) / kSteps,
          (transfer_seconds() - transfers_before) / kSteps};
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [] {
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 4) throw std::runtime_error("run tensor_parallel_bench on 4 ranks");
    const Figures replicas = measure(world, 2, 1, true);
    const Figures partitioned = measure(world, 1, 2, true);
    const Figures whole = measure(world, 1, 2, false);
    if (world->rank() != 0) return 0;
    std::printf("GPT d=128 layers=4, %d micro-batches of %lld x 64 tokens, 2 stages, 4 ranks:\n",
                kMicroBatches, static_cast<long long>(kMicroBatchSize));
    auto line = [](const char* what, const Figures& f) {
      std::printf("  %-40s %7.1f samples/s  %9lld bytes/step  %.3f s/step in transfers\n", what,
                  f.samples_per_second, static_cast<long long>(f.bytes_per_step),
                  f.transfer_seconds);
    };
    line("pipe 2 x data 2", replicas);
    line("pipe 2 x model 2, partitioned transfers", partitioned);
    line("pipe 2 x model 2, whole transfers", whole);
    std::printf("  partitioned / whole bytes between stages: %.3f (rank 0)\n",
                static_cast<double>(partitioned.bytes_per_step) / whole.bytes_per_step);
    return 0;
  });
}
