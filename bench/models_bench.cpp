// The LLaMA next to the GPT of the same width, in one run of two ranks (one intra-op
// thread each):
//   pipetrain launch -n 2 -- build/bench/models_bench [REPETITIONS]
// Both at d 512, 8 blocks, context 256, vocabulary 256, pipe 2 (1F1B), 4 micro-batches of 1
// sample, AdamW fp32; the LLaMA with 8 query / 2 key-value heads and intermediate size
// 1408 (about 8/3 d, as LLaMA sizes its SwiGLU). The two models alternate in every
// repetition; samples/s are medians, the ratio is per repetition.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

constexpr int kMicroBatches = 4;

models::ModelConfig gpt() {
  models::ModelConfig c;
  c.gpt = {.vocab_size = 256, .context = 256, .d_model = 512, .heads = 8, .layers = 8};
  return c;
}

models::ModelConfig llama() {
  models::ModelConfig c;
  c.type = models::family("llama");
  c.llama = {.vocab_size = 256,
             .context = 256,
             .d_model = 512,
             .heads = 8,
             .num_key_value_heads = 2,
             .intermediate_size = 1408,
             .layers = 8};
  return c;
}

struct Run {
  std::string name;
  int64_t parameters = 0;
  std::shared_ptr<module::PipelineModule> module{};
  std::unique_ptr<engine::PipelineEngine> engine{};
  std::unique_ptr<data::RepeatingLoader> data{};
};

Run make_run(const std::shared_ptr<comm::MpiCommunicator>& world, const std::string& name,
             const models::ModelConfig& config) {
  auto grid = std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(2, 1), world);
  engine::TrainingConfig training;
  training.train_micro_batch_size_per_gpu = 1;
  training.gradient_accumulation_steps = kMicroBatches;
  training.steps_per_print = 1 << 30;
  training.optimizer = {"AdamW", {{"lr", 1e-4}}};
  const models::BuiltinModel model = models::make_builtin_model(config);
  Run run{name};
  std::set<std::string> tie_keys;  // a tied module counts once
  for (const auto& layer : model.layers) {
    if (!layer.tied() || tie_keys.insert(layer.tie_key).second)
      run.parameters += layer.count_parameters();
  }
  run.module = std::make_shared<module::PipelineModule>(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = 2, .stage_id = grid->stage_id()});
  run.engine = std::make_unique<engine::PipelineEngine>(run.module, grid, training);
  at::manual_seed(7);
  const models::TokenInput tokens = *model.tokens();
  auto samples = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(tokens.vocab_size, {64, tokens.context}, at::kLong)},
      module::Activation{at::randint(tokens.vocab_size, {64, tokens.context}, at::kLong)});
  run.data =
      std::make_unique<data::RepeatingLoader>(std::make_unique<data::DataLoader>(samples, 1, 1, 0));
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 2) {
      std::fprintf(stderr, "models_bench runs on 2 ranks\n");
      return 2;
    }
    const int repetitions = argc > 1 ? std::stoi(argv[1]) : 5;
    std::vector<Run> runs;
    runs.push_back(make_run(world, "GPT", gpt()));
    runs.push_back(make_run(world, "LLaMA", llama()));
    for (auto& run : runs) run.engine->train_batch(run.data.get());  // warm-up
    std::vector<std::vector<double>> rate(runs.size());
    for (int rep = 0; rep < repetitions; ++rep) {
      for (std::size_t i = 0; i < runs.size(); ++i) {
        world->barrier();
        const auto start = Clock::now();
        runs[i].engine->train_batch(runs[i].data.get());
        world->barrier();
        rate[i].push_back(kMicroBatches /
                          std::chrono::duration<double>(Clock::now() - start).count());
      }
    }
    if (world->rank() != 0) return 0;
    std::printf(
        "pipe 2, d 512, 8 blocks, context 256, %d micro-batches of 1, AdamW fp32, %d "
        "interleaved repetitions\n",
        kMicroBatches, repetitions);
    std::vector<double> ratios;
    for (int r = 0; r < repetitions; ++r) ratios.push_back(rate[1][r] / rate[0][r]);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      std::printf("    %-5s %6.1f M parameters  %.3f samples/s  %.0f tokens/s (median)\n",
                  runs[i].name.c_str(), runs[i].parameters / 1e6, median(rate[i]),
                  median(rate[i]) * 256);
    }
    std::printf("    LLaMA / GPT samples/s: median %.3f (per repetition %.3f-%.3f)\n",
                median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()));
    return 0;
  });
}
