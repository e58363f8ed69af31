// ZeRO side by side, in one run of four ranks (one intra-op thread each):
//   pipetrain launch -n 4 -- build/bench/zero_bench [REPETITIONS] [CLUSTER_FILE]
// GPT d 512, 8 layers, context 64, AdamW; memory by the counting CPU allocator.
// (a) per rank at data 1, 2 and 4 (pipe 1), fp32 and bf16, after one step: the bytes held
//     between steps (parameters, gradients, optimizer state, masters, reduction buffers:
//     the model state) and the optimizer's own (moments, step counts, fp32 masters), ZeRO
//     stages 0 to 3;
// (b) at pipe 2 x data 2 (fp32, 4 micro-batches of 2): each rank's peak during a step and
//     the step time of stages 0, 1, 2, 3 and 3 with the layers kept after forward, the
//     settings interleaved in every repetition; beside them what `pipetrain plan` predicts
//     for the same layout from CLUSTER_FILE (default clusters/this-machine.json, its 2
//     cores shared by the 4 ranks).
#include <ATen/ATen.h>

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "device/cpu_memory.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"
#include "planner/cluster.h"
#include "planner/prediction.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

const models::GptConfig kGpt{
    .vocab_size = 256, .context = 64, .d_model = 512, .heads = 8, .layers = 8};
constexpr double kMiB = 1024.0 * 1024.0;

struct Setting {
  int stage = 0;
  bool reshard = true;
  std::string label() const { return "stage " + std::to_string(stage) + (reshard ? "" : " kept"); }
};

engine::TrainingConfig config_for(const Setting& setting, int micro_batches,
                                  optim::Precision precision) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = 2;
  config.gradient_accumulation_steps = micro_batches;
  config.steps_per_print = 1 << 30;
  config.optimizer = {"AdamW", {{"lr", 1e-4}}};
  config.precision.dtype = precision;
  config.zero.stage = setting.stage;
  config.zero.reshard_after_forward = setting.reshard;
  // PIPETRAIN_BENCH_OVERLAP=0: buckets reduced after backward (overlap_grad_reduce false).
  const char* overlap = std::getenv("PIPETRAIN_BENCH_OVERLAP");
  config.overlap_grad_reduce = !overlap || std::string(overlap) != "0";
  return config;
}

struct Run {
  std::shared_ptr<module::PipelineModule> module;
  std::unique_ptr<engine::PipelineEngine> engine;
  std::unique_ptr<data::RepeatingLoader> data;
  int64_t at_rest = 0;  // bytes this run holds between steps, after its first step
};

// Builds a run on `comm` and takes its first step (so that its state exists).
Run make_run(const std::shared_ptr<comm::MpiCommunicator>& comm, int stages,
             const engine::TrainingConfig& config) {
  auto grid = std::make_shared<topology::Grid>(
      topology::pipe_data_parallel_topology(stages, comm->size() / stages), comm);
  at::manual_seed(7);
  auto samples = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(kGpt.vocab_size, {256, kGpt.context}, at::kLong)},
      module::Activation{at::randint(kGpt.vocab_size, {256, kGpt.context}, at::kLong)});
  const int64_t before = device::cpu_memory()->allocated;
  Run run;
  run.module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(kGpt), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = stages, .stage_id = grid->stage_id()});
  run.engine = std::make_unique<engine::PipelineEngine>(run.module, grid, config);
  run.data = std::make_unique<data::RepeatingLoader>(
      std::make_unique<data::DataLoader>(samples, config.train_micro_batch_size_per_gpu,
                                         grid->data_parallel_size(), grid->data_parallel_id()));
  run.engine->train_batch(run.data.get());
  run.at_rest = device::cpu_memory()->allocated - before;
  return run;
}

int64_t most(comm::Communicator& world, int64_t value) {
  at::Tensor t = at::tensor({value});
  world.all_reduce(t, comm::ReduceOp::kMax);
  return t.item<int64_t>();
}

void state_bytes(const std::shared_ptr<comm::MpiCommunicator>& world) {
  if (world->rank() == 0) {
    std::printf(
        "(a) per rank (most of any rank), GPT d %lld, %lld layers, AdamW, pipe 1, after one "
        "step: the model state held between steps / the optimizer's state, MiB\n",
        static_cast<long long>(kGpt.d_model), static_cast<long long>(kGpt.layers));
    std::printf(
        "    precision  data  stage 0          stage 1                stage 2                "
        "stage 3                1/data\n");
  }
  for (auto precision : {optim::Precision::kFp32, optim::Precision::kBf16}) {
    for (int data : {1, 2, 4}) {
      auto group = world->split(world->rank() < data ? 0 : 1, world->rank());
      std::vector<double> rest, optimizer;
      for (int stage : {0, 1, 2, 3}) {
        int64_t held = 0, state = 0;
        if (world->rank() < data && (stage == 0 || data > 1)) {
          Run run = make_run(group, 1, config_for({.stage = stage}, 1, precision));
          held = run.at_rest;
          state = run.engine->optimizer_state_bytes();
        }
        rest.push_back(static_cast<double>(most(*world, held)) / kMiB);
        optimizer.push_back(static_cast<double>(most(*world, state)) / kMiB);
      }
      if (world->rank() != 0) continue;
      std::printf("    %-9s  %4d  %6.1f / %6.1f",
                  precision == optim::Precision::kFp32 ? "fp32" : "bf16", data, rest[0],
                  optimizer[0]);
      for (int stage = 1; stage <= 3; ++stage) {
        if (data == 1) {
          std::printf("  %21s", "-");
          continue;
        }
        std::printf("  %6.1f / %6.1f (%.3f)", rest[stage], optimizer[stage], rest[stage] / rest[0]);
      }
      std::printf("  %.4f\n", 1.0 / data);
    }
  }
}

// The planner's step seconds and peak bytes for `setting` at pipe 2 x data 2.
planner::Prediction predicted(const Setting& setting, const std::string& cluster_file) {
  planner::Cluster cluster = planner::read_cluster(cluster_file);
  cluster.devices_per_node = 4;  // the 4 ranks on this machine's 2 cores
  if (cluster.shared_cores == 0) cluster.shared_cores = 2;
  models::ModelConfig model;
  model.gpt = kGpt;
  const planner::Workload workload(model, config_for(setting, 4, optim::Precision::kFp32));
  return planner::predict(workload, cluster,
                          planner::Layout{.parallel = {.pipe = 2, .data = 2},
                                          .micro_batch = 2,
                                          .micro_batches = 4,
                                          .zero = setting.stage});
}

void step_time(const std::shared_ptr<comm::MpiCommunicator>& world, int repetitions,
               const std::string& cluster_file) {
  const std::vector<Setting> settings = {{0, true}, {1, true}, {2, true}, {3, true}, {3, false}};
  const int n = static_cast<int>(settings.size());
  std::vector<Run> runs;
  for (const Setting& s : settings)
    runs.push_back(make_run(world, 2, config_for(s, 4, optim::Precision::kFp32)));
  std::vector<std::vector<double>> seconds(n);
  std::vector<int64_t> peak(n, 0);  // the most held during a step, this rank
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int i = 0; i < n; ++i) {
      world->barrier();
      const int64_t before = device::cpu_memory()->allocated;
      device::reset_cpu_peak();
      const auto start = Clock::now();
      runs[i].engine->train_batch(runs[i].data.get());
      seconds[i].push_back(std::chrono::duration<double>(Clock::now() - start).count());
      peak[i] = std::max(peak[i], runs[i].at_rest + device::cpu_memory()->peak_allocated - before);
    }
  }
  std::vector<int64_t> peaks, rests;
  for (int i = 0; i < n; ++i) {
    peaks.push_back(most(*world, peak[i]));
    rests.push_back(most(*world, runs[i].at_rest));
  }
  if (world->rank() != 0) return;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf(
      "(b) pipe 2 x data 2, GPT d %lld, %lld layers, 4 micro-batches of 2 x %lld tokens, AdamW "
      "fp32, %d interleaved repetitions; most of any rank; planned from %s\n",
      static_cast<long long>(kGpt.d_model), static_cast<long long>(kGpt.layers),
      static_cast<long long>(kGpt.context), repetitions, cluster_file.c_str());
  std::printf(
      "    setting        at rest MiB  peak MiB (planned)  step s  x stage 0 (per repetition)  "
      "planned s  planned x stage 0\n");
  const planner::Prediction plan0 = predicted(settings[0], cluster_file);
  for (int i = 0; i < n; ++i) {
    std::vector<double> ratios;
    for (int r = 0; r < repetitions; ++r) ratios.push_back(seconds[i][r] / seconds[0][r]);
    const planner::Prediction plan = predicted(settings[i], cluster_file);
    std::printf("    %-13s  %11.1f  %8.1f (%7.1f)  %6.3f  %.3f (%.3f-%.3f)          %9.3f  %.3f\n",
                settings[i].label().c_str(), rests[i] / kMiB, peaks[i] / kMiB,
                plan.peak_bytes() / kMiB, median(seconds[i]), median(ratios),
                *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()), plan.step_seconds,
                plan.step_seconds / plan0.step_seconds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  device::count_cpu_memory();  // before any tensor
  return comm::run_rank(argc, argv, [&] {
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 4) {
      std::fprintf(stderr, "zero_bench runs on 4 ranks\n");
      return 2;
    }
    const std::string cluster = argc > 2 ? argv[2] : "clusters/this-machine.json";
    state_bytes(world);
    step_time(world, argc > 1 ? std::stoi(argv[1]) : 5, cluster);
    return 0;
  });
}
