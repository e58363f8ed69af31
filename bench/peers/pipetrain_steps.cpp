// pipetrain's side of bench/peers/peers_bench.py, measured the way the Python runners
// measure the peers: the built-in GPT (tied, dropout 0), random token micro-batches held in
// memory, AdamW (lr 1e-4, no weight decay), layers split "type:GptBlock", and the wall time
// of each train_batch between barriers after `warmup` steps. Rank 0 prints one line:
//   STEPS [seconds, ...]
// Usage (under pipetrain launch -n STAGES, one intra-op thread per rank):
//   pipetrain_steps D HEADS LAYERS CONTEXT MICRO_BATCH MICRO_BATCHES STAGES STEPS WARMUP
//                   [0 [OVERLAP_GRAD_REDUCE [BUCKET_ELEMENTS]]]
// (the tenth argument, once receives posted ahead, which were removed, must be 0;
// overlap_grad_reduce: 0 or 1, the default; ddp_bucket_size, default 25000000).
// PIPETRAIN_BENCH_SCHEDULE names the schedule (pipeline.schedule's names; default 1f1b),
// with its least chunks (2 for zbv and dualpipev).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;
constexpr int64_t kVocab = 256;

int run(const std::vector<int64_t>& a) {
  const int64_t d = a[0], heads = a[1], layers = a[2], context = a[3], micro_batch = a[4],
                micro_batches = a[5], steps = a[7], warmup = a[8];
  const int stages = static_cast<int>(a[6]);
  auto world = comm::MpiCommunicator::world();
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_data_parallel_topology(stages, world->size() / stages), world);
  models::ModelConfig model_config;
  model_config.gpt = {
      .vocab_size = kVocab, .context = context, .d_model = d, .heads = heads, .layers = layers};
  const models::BuiltinModel model = models::make_builtin_model(model_config);

  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = micro_batch;
  config.gradient_accumulation_steps = micro_batches;
  config.steps_per_print = 1 << 30;
  config.optimizer = {"AdamW", {{"lr", 1e-4}, {"weight_decay", 0.0}}};
  config.pipeline.partition_method = "type:GptBlock";
  int chunks = 1;
  if (const char* name = std::getenv("PIPETRAIN_BENCH_SCHEDULE")) {
    config.pipeline.schedule.kind =
        config::read_choice("PIPETRAIN_BENCH_SCHEDULE", nlohmann::json(name),
                            schedule::schedule_names(), config::Quoting::kQuoted);
    chunks = schedule::schedule_kind(config.pipeline.schedule.kind).least_config_chunks();
  }
  if (a.size() >= 10 && a[9] != 0)
    throw std::invalid_argument("the tenth argument must be 0: receives ahead were removed");
  config.overlap_grad_reduce = a.size() < 11 || a[10] != 0;
  if (a.size() >= 12) config.ddp_bucket_size = a[11];
  auto module = std::make_shared<module::PipelineModule>(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = stages,
                                    .stage_id = grid->stage_id(),
                                    .chunks = chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .partition_method = config.pipeline.partition_method});
  engine::PipelineEngine engine(module, grid, config);

  at::manual_seed(7);
  const int64_t samples = micro_batch * micro_batches * 4;
  auto data = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(kVocab, {samples, context}, at::kLong)},
      module::Activation{at::randint(kVocab, {samples, context}, at::kLong)});
  data::RepeatingLoader loader(std::make_unique<data::DataLoader>(data, micro_batch, 1, 0));

  std::vector<double> seconds;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    world->barrier();
    const auto start = Clock::now();
    engine.train_batch(&loader);
    world->barrier();
    if (step >= warmup)
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (world->rank() == 0) {
    std::printf("STEPS [");
    for (std::size_t i = 0; i < seconds.size(); ++i) std::printf(i ? ", %.6f" : "%.6f", seconds[i]);
    std::printf("]\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    if (argc < 10 || argc > 13) {
      std::fprintf(stderr,
                   "usage: pipetrain_steps D HEADS LAYERS CONTEXT MICRO_BATCH MICRO_BATCHES "
                   "STAGES STEPS WARMUP [RECEIVE_AHEAD [OVERLAP_GRAD_REDUCE [BUCKET_ELEMENTS]]]\n");
      return 2;
    }
    std::vector<int64_t> a;
    for (int i = 1; i < argc; ++i) a.push_back(std::stoll(argv[i]));
    return run(a);
  });
}
