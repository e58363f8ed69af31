// What the engine costs on top of the model's own compute, measured side by side in one
// run of two ranks (one intra-op thread each):
//   pipetrain launch -n 2 -- build/bench/engine_bench
// (a) overhead per instruction: a pipeline of near-empty layers on tiny tensors;
// (b) samples/s of a small GPT: a plain single-process LibTorch loop, the engine on one
//     stage, and the engine on two stages, against the speed-up the schedule simulator
//     predicts for two stages.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/schedule/simulator.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

constexpr int kMicroBatches = 8;
constexpr int kWarmupSteps = 2;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// x * w with one scalar parameter: a layer whose compute is next to nothing.
module::LayerSpec scale_layer() {
  module::LayerSpec spec;
  spec.type = "Scale";
  spec.build = [] {
    auto module = std::make_shared<torch::nn::Module>();
    auto weight = module->register_parameter("weight", at::ones({1}));
    return module::Layer{module, [weight](const module::Activation& x) {
                           return module::Activation{x[0] * weight};
                         }};
  };
  return spec;
}

engine::TrainingConfig config_for(int64_t micro_batch_size) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = micro_batch_size;
  config.gradient_accumulation_steps = kMicroBatches;
  config.steps_per_print = 1 << 30;
  return config;
}

// Seconds per train_batch over `steps` steps after a warm-up.
double time_engine(engine::PipelineEngine& engine, engine::MicroBatchSource& data, int steps,
                   comm::Communicator& comm) {
  for (int i = 0; i < kWarmupSteps; ++i) engine.train_batch(&data);
  comm.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) engine.train_batch(&data);
  return seconds_since(start) / steps;
}

std::shared_ptr<topology::Grid> grid_over(const std::shared_ptr<comm::MpiCommunicator>& comm,
                                          int stages) {
  return std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(stages, 1), comm);
}

void overhead(const std::shared_ptr<comm::MpiCommunicator>& world) {
  std::vector<module::LayerSpec> layers(8, scale_layer());
  auto grid = grid_over(world, 2);
  auto module = std::make_shared<module::PipelineModule>(
      layers, [](const module::Activation& out, const module::Activation&) { return out[0].sum(); },
      module::PipelineModuleOptions{
          .stages = 2, .stage_id = grid->stage_id(), .partition_method = "uniform"});
  engine::PipelineEngine engine(module, grid, config_for(1));
  auto data = std::make_shared<data::TensorDataset>(module::Activation{at::ones({64, 4})},
                                                    module::Activation{at::zeros({64, 1})});
  data::RepeatingLoader loader(std::make_unique<data::DataLoader>(data, 1, 1, 0));
  const int64_t before = engine.instructions_executed();
  const int steps = 200;
  const double per_step = time_engine(engine, loader, steps, *world);
  const double instructions =
      static_cast<double>(engine.instructions_executed() - before) / (steps + kWarmupSteps);
  if (world->rank() == 0) {
    std::printf(
        "(a) engine overhead: %.1f instructions per step per stage, %.2f us per instruction "
        "(near-empty layers, 1x4 tensors, 2 stages, %d micro-batches)\n",
        instructions, per_step / instructions * 1e6, kMicroBatches);
  }
}

void throughput(const std::shared_ptr<comm::MpiCommunicator>& world) {
  const models::GptConfig gpt{
      .vocab_size = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 4};
  const int64_t micro_batch_size = 4;
  const int steps = 3;
  const int64_t samples = micro_batch_size * kMicroBatches;
  auto data = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(256, {samples * 4, 64}, at::kLong)},
      module::Activation{at::randint(256, {samples * 4, 64}, at::kLong)});

  // Rank 0 alone: the plain loop and the one-stage engine.
  auto alone = world->split(world->rank() == 0 ? 0 : 1, world->rank());
  double plain = 0, one_stage = 0;
  if (world->rank() == 0) {
    module::PipelineModule model(models::gpt_layers(gpt), models::gpt_loss(), {});
    torch::optim::Adam adam(model.parameters(), torch::optim::AdamOptions(1e-3));
    data::DataLoader loader(data, samples, 1, 0);
    auto plain_step = [&] {
      engine::MicroBatch batch = loader.next();
      adam.zero_grad();
      model.loss(model.forward(batch.inputs), batch.labels).backward();
      adam.step();
    };
    for (int i = 0; i < kWarmupSteps; ++i) plain_step();
    loader.reset(0);
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) plain_step();
    plain = seconds_since(start) / steps;

    auto grid = grid_over(alone, 1);
    auto module = std::make_shared<module::PipelineModule>(
        models::gpt_layers(gpt), models::gpt_loss(), module::PipelineModuleOptions{});
    engine::PipelineEngine engine(module, grid, config_for(micro_batch_size));
    data::RepeatingLoader repeating(
        std::make_unique<data::DataLoader>(data, micro_batch_size, 1, 0));
    one_stage = time_engine(engine, repeating, steps, *alone);
  }
  world->barrier();

  auto grid = grid_over(world, 2);
  auto module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(gpt), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = 2, .stage_id = grid->stage_id()});
  engine::PipelineEngine engine(module, grid, config_for(micro_batch_size));
  data::RepeatingLoader repeating(std::make_unique<data::DataLoader>(data, micro_batch_size, 1, 0));
  const double two_stages = time_engine(engine, repeating, steps, *world);
  // Where each stage's time went, to explain the gap to the ideal.
  using schedule::OpKind;
  const auto& t = engine.timers();
  const double compute = t.seconds(OpKind::kForwardPass) + t.seconds(OpKind::kBackwardPass);
  double waiting = 0;
  for (auto kind :
       {OpKind::kSendActivation, OpKind::kRecvActivation, OpKind::kSendGrad, OpKind::kRecvGrad}) {
    waiting += t.seconds(kind);
  }
  const at::Tensor split = world->all_gather(at::tensor({compute, waiting}, at::kDouble));

  if (world->rank() != 0) return;
  const auto plan = schedule::plan_pipeline("train", {kMicroBatches, 2});
  schedule::CostModel costs;  // forward 1, backward 2 per stage (half the model each)
  const double single = kMicroBatches * 2 * 3.0;  // the whole model on one device
  const double ideal = single / schedule::simulate(plan, costs).makespan;
  std::printf(
      "(b) GPT d=%lld layers=%lld, %d micro-batches of %lld x %lld tokens, one thread per rank:\n",
      static_cast<long long>(gpt.d_model), static_cast<long long>(gpt.layers), kMicroBatches,
      static_cast<long long>(micro_batch_size), static_cast<long long>(gpt.context));
  std::printf("    plain LibTorch loop      %8.1f samples/s\n", samples / plain);
  std::printf("    engine, 1 stage          %8.1f samples/s  (%.3f x plain)\n", samples / one_stage,
              plain / one_stage);
  std::printf(
      "    engine, 2 stages         %8.1f samples/s  (%.3f x plain; simulator's ideal %.3f)\n",
      samples / two_stages, plain / two_stages, ideal);
  for (int stage = 0; stage < 2; ++stage) {
    const double c = split[stage][0].item<double>(), w = split[stage][1].item<double>();
    std::printf("    stage %d: forward+backward %.3f s, waiting in transfers %.3f s (%.0f%%)\n",
                stage, c, w, 100 * w / (c + w));
  }
}

// (c) bf16 against fp32 on two stages: bytes moved between stages per step and step time.
void precision(const std::shared_ptr<comm::MpiCommunicator>& world) {
  const models::GptConfig gpt{
      .vocab_size = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 4};
  auto data = std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(256, {64, 64}, at::kLong)},
      module::Activation{at::randint(256, {64, 64}, at::kLong)});
  double seconds[2] = {0, 0};
  int64_t bytes[2] = {0, 0};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    auto grid = grid_over(world, 2);
    engine::TrainingConfig config = config_for(4);
    config.precision.dtype = bf16 ? optim::Precision::kBf16 : optim::Precision::kFp32;
    auto module = std::make_shared<module::PipelineModule>(
        models::gpt_layers(gpt), models::gpt_loss(),
        module::PipelineModuleOptions{.stages = 2, .stage_id = grid->stage_id()});
    engine::PipelineEngine engine(module, grid, config);
    data::RepeatingLoader loader(std::make_unique<data::DataLoader>(data, 4, 1, 0));
    const int steps = 3;
    seconds[bf16] = time_engine(engine, loader, steps, *world);
    bytes[bf16] = engine.p2p_bytes() / (steps + kWarmupSteps);
  }
  if (world->rank() == 0) {
    std::printf(
        "(c) same GPT, 2 stages: bytes between stages per step and rank: fp32 %lld, bf16 %lld "
        "(%.2fx); "
        "step time bf16 / fp32 = %.2f\n",
        static_cast<long long>(bytes[0]), static_cast<long long>(bytes[1]),
        static_cast<double>(bytes[1]) / bytes[0], seconds[1] / seconds[0]);
  }
}

// (d) The compute-bound GPT on one stage against a plain LibTorch loop over the same
// micro-batches (gradients accumulated, loss scaled by 1/M), the same Adam: rank 0 alone,
// repetitions interleaved, medians.
void one_stage_gap(const std::shared_ptr<comm::MpiCommunicator>& world, int repetitions) {
  const models::GptConfig gpt{
      .vocab_size = 256, .context = 128, .d_model = 384, .heads = 6, .layers = 8, .dropout = 0.0};
  const int64_t micro_batch_size = 4;
  auto alone = world->split(world->rank() == 0 ? 0 : 1, world->rank());
  if (world->rank() != 0) {
    world->barrier();
    return;
  }
  auto data = std::make_shared<data::TensorDataset>(
      module::Activation{
          at::randint(256, {micro_batch_size * kMicroBatches, gpt.context}, at::kLong)},
      module::Activation{
          at::randint(256, {micro_batch_size * kMicroBatches, gpt.context}, at::kLong)});

  module::PipelineModule plain_model(models::gpt_layers(gpt), models::gpt_loss(), {});
  torch::optim::Adam adam(plain_model.parameters(), torch::optim::AdamOptions(1e-3));
  data::RepeatingLoader plain_data(
      std::make_unique<data::DataLoader>(data, micro_batch_size, 1, 0));
  auto plain_step = [&] {
    adam.zero_grad();
    for (int i = 0; i < kMicroBatches; ++i) {
      engine::MicroBatch batch = plain_data.next();
      const at::Tensor loss = plain_model.loss(plain_model.forward(batch.inputs), batch.labels);
      (loss / kMicroBatches).backward();
    }
    adam.step();
  };

  auto module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(gpt), models::gpt_loss(), module::PipelineModuleOptions{});
  engine::PipelineEngine engine(module, grid_over(alone, 1), config_for(micro_batch_size));
  data::RepeatingLoader engine_data(
      std::make_unique<data::DataLoader>(data, micro_batch_size, 1, 0));

  std::vector<double> plain, piped;
  plain_step();
  engine.train_batch(&engine_data);
  auto time_plain = [&] {
    const auto start = Clock::now();
    plain_step();
    plain.push_back(seconds_since(start));
  };
  auto time_engine = [&] {
    const auto start = Clock::now();
    engine.train_batch(&engine_data);
    piped.push_back(seconds_since(start));
  };
  for (int r = 0; r < repetitions; ++r) {  // who goes first alternates
    if (r % 2 == 0) {
      time_plain();
      time_engine();
    } else {
      time_engine();
      time_plain();
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::printf(
      "(d) GPT d=384 layers=8 context 128, %d micro-batches of 4, one stage, %d interleaved "
      "repetitions:\n    plain loop %.3f s, engine %.3f s per step (engine %.3f x plain); per "
      "repetition:",
      kMicroBatches, repetitions, median(plain), median(piped), median(plain) / median(piped));
  for (int r = 0; r < repetitions; ++r) std::printf(" %.3f", plain[r] / piped[r]);
  std::printf("\n");
  world->barrier();
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    at::set_num_threads(1);
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 2) {
      std::fprintf(stderr, "engine_bench needs exactly 2 ranks\n");
      return 2;
    }
    const bool only_gap = argc > 1 && std::string(argv[1]) == "gap";
    if (!only_gap) {
      overhead(world);
      throughput(world);
      precision(world);
    }
    one_stage_gap(world, 7);
    return 0;
  });
}
