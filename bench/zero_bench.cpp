// ZeRO side by side, in one run of four ranks (one intra-op thread each):
//   pipetrain launch -n 4 -- build/bench/zero_bench [REPETITIONS]
// (a) optimizer-state bytes per rank (measured from the tensors the optimizer holds:
//     moments, step counts and fp32 masters kept beside the model) for a GPT with d 512 and
//     8 layers at data-parallel size 1, 2 and 4, ZeRO stage 0, 1 and 2, fp32 and bf16;
// (b) step time of stage 1 and 2 against stage 0 at pipe 2 x data 2 (AdamW, fp32), the
//     stages interleaved in every repetition, with the time of the reduction and the
//     optimizer step (where ZeRO changes the work) shown apart.
#include <ATen/ATen.h>

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

const models::GptConfig kGpt{
    .vocab_size = 256, .context = 64, .d_model = 512, .heads = 8, .layers = 8};

engine::TrainingConfig config_for(int zero_stage, int stages, int micro_batches,
                                  engine::Precision precision) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = 2;
  config.gradient_accumulation_steps = micro_batches;
  config.steps_per_print = 1 << 30;
  config.optimizer = {"AdamW", {{"lr", 1e-4}}};
  config.pipeline.stages = stages;
  config.precision.dtype = precision;
  config.zero.stage = zero_stage;
  // PIPETRAIN_BENCH_OVERLAP=0: buckets reduced after backward (overlap_grad_reduce false).
  const char* overlap = std::getenv("PIPETRAIN_BENCH_OVERLAP");
  config.overlap_grad_reduce = !overlap || std::string(overlap) != "0";
  return config;
}

struct Run {
  std::shared_ptr<module::PipelineModule> module;
  std::unique_ptr<engine::PipelineEngine> engine;
  std::unique_ptr<data::RepeatingLoader> data;
};

Run make_run(const std::shared_ptr<comm::MpiCommunicator>& comm, int stages,
             const engine::TrainingConfig& config) {
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_data_parallel_topology(stages, comm->size() / stages), comm);
  Run run;
  run.module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(kGpt), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = stages, .stage_id = grid->stage_id()});
  run.engine = std::make_unique<engine::PipelineEngine>(run.module, grid, config);
  at::manual_seed(7);
  auto samples = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(kGpt.vocab_size, {256, kGpt.context}, at::kLong)},
      module::Activation{at::randint(kGpt.vocab_size, {256, kGpt.context}, at::kLong)});
  run.data = std::make_unique<data::RepeatingLoader>(
      std::make_unique<data::DataLoader>(samples, config.train_micro_batch_size_per_gpu,
                                         grid->data_parallel_size(), grid->data_parallel_id()));
  return run;
}

void state_bytes(const std::shared_ptr<comm::MpiCommunicator>& world) {
  if (world->rank() == 0) {
    std::printf(
        "(a) optimizer-state bytes per rank (most of any rank), GPT d %lld, %lld layers, "
        "AdamW, pipe 1, after one step\n",
        static_cast<long long>(kGpt.d_model), static_cast<long long>(kGpt.layers));
    std::printf(
        "    precision  data  stage 0 MiB  stage 1 MiB (ratio)  stage 2 MiB (ratio)  1/data\n");
  }
  for (auto precision : {engine::Precision::kFp32, engine::Precision::kBf16}) {
    for (int data : {1, 2, 4}) {
      auto group = world->split(world->rank() < data ? 0 : 1, world->rank());
      std::vector<double> mib;
      for (int stage : {0, 1, 2}) {
        int64_t bytes = 0;
        if (world->rank() < data) {
          Run run = make_run(group, 1, config_for(stage, 1, 1, precision));
          run.engine->train_batch(run.data.get());
          bytes = run.engine->optimizer_state_bytes();
        }
        at::Tensor most = at::tensor({bytes});
        world->all_reduce(most, comm::ReduceOp::kMax);
        mib.push_back(static_cast<double>(most.item<int64_t>()) / (1024.0 * 1024.0));
      }
      if (world->rank() == 0) {
        std::printf("    %-9s  %4d  %11.1f  %11.1f (%.4f)  %11.1f (%.4f)  %.4f\n",
                    precision == engine::Precision::kFp32 ? "fp32" : "bf16", data, mib[0], mib[1],
                    mib[1] / mib[0], mib[2], mib[2] / mib[0], 1.0 / data);
      }
    }
  }
}

void step_time(const std::shared_ptr<comm::MpiCommunicator>& world, int repetitions) {
  const int stages[] = {0, 1, 2};
  std::vector<Run> runs;
  for (int stage : stages)
    runs.push_back(make_run(world, 2, config_for(stage, 2, 4, engine::Precision::kFp32)));
  for (auto& run : runs) run.engine->train_batch(run.data.get());  // warm-up: state exists
  std::vector<std::vector<double>> seconds(3);
  std::vector<double> reduce_and_step(3, 0.0);
  using schedule::OpKind;
  auto optimizer_seconds = [](const engine::PipelineEngine& e) {
    return e.timers().seconds(OpKind::kReduceGrads) + e.timers().seconds(OpKind::kOptimizerStep);
  };
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int i = 0; i < 3; ++i) {
      world->barrier();
      const double before = optimizer_seconds(*runs[i].engine);
      const auto start = Clock::now();
      runs[i].engine->train_batch(runs[i].data.get());
      seconds[i].push_back(std::chrono::duration<double>(Clock::now() - start).count());
      reduce_and_step[i] += optimizer_seconds(*runs[i].engine) - before;
    }
  }
  for (int i = 0; i < 3; ++i) {
    at::Tensor most = at::tensor({reduce_and_step[i] / repetitions}, at::kDouble);
    world->all_reduce(most, comm::ReduceOp::kMax);
    reduce_and_step[i] = most.item<double>();
  }
  if (world->rank() != 0) return;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "(b) step time at pipe 2 x data 2, GPT d %lld, %lld layers, 4 micro-batches of 2 x "
      "%lld tokens, AdamW fp32, %d interleaved repetitions\n",
      static_cast<long long>(kGpt.d_model), static_cast<long long>(kGpt.layers),
      static_cast<long long>(kGpt.context), repetitions);
  for (int i = 0; i < 3; ++i) {
    std::vector<double> ratios;
    for (int r = 0; r < repetitions; ++r) ratios.push_back(seconds[i][r] / seconds[0][r]);
    std::printf(
        "    stage %d: median %.3f s per step, %.3f x stage 0 (per repetition %.3f-%.3f); "
        "reduction + optimizer step %.3f s (slowest rank)\n",
        stages[i], median(seconds[i]), median(ratios),
        *std::min_element(ratios.begin(), ratios.end()),
        *std::max_element(ratios.begin(), ratios.end()), reduce_and_step[i]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 4) {
      std::fprintf(stderr, "zero_bench runs on 4 ranks\n");
      return 2;
    }
    state_bytes(world);
    step_time(world, argc > 1 ? std::stoi(argv[1]) : 5);
    return 0;
  });
}
