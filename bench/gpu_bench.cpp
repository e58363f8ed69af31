// The engine on a GPU, side by side in one run (scripts/device-check runs it):
//   pipetrain launch -n 4 -- build/bench/gpu_bench [a|b|c] [N]
// (N: for b, only the Nth shape, 0 or 1; for c, pipes up to N only: scripts/device-check's
// short tiers)
// (a) engine overhead: GPT d 1024, 8 layers, context 1024, bf16, micro-batch 8, 8 micro-
//     batches, one stage, against a plain LibTorch loop doing the same work in this binary
//     (bf16 model, fp32 masters, ATen's fused AdamW, the same micro-batches from pinned
//     memory); rank 0 alone, repetitions interleaved, medians;
// (b) throughput: GPT d 2048, 8 layers, context 2048 and GPT d 4096, 4 layers, context 2048,
//     bf16, 4 micro-batches of 8, one stage: model TFLOP/s by Megatron's formula of the
//     engine and the plain loop, interleaved (bench/gpu_eager.py runs PyTorch eager alike);
// (c) pipe 2 and pipe 4 on the one GPU (the ranks share it; the transport between them as
//     the job picks it: MPI, or NCCL with PIPETRAIN_EMULATED_HOSTS=1) against pipe 1, the
//     (a) model: step times interleaved, and each rank's peak GPU memory; and two pipe-1
//     jobs at once, which shows what sharing the GPU between processes costs by itself.
// Lines start with "(a)", "(b)", "(c)"; scripts/device-check reads the "(b) ... TFLOP/s" ones.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "device/cuda.h"
#include "optim/fused_adam.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;

constexpr int kRepetitions = 5;
constexpr double kLearningRate = 1e-4;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Shape {
  models::GptConfig gpt;
  int64_t micro_batch;
  int micro_batches;
};

const Shape kOverheadShape{
    {.vocab_size = 50304, .context = 1024, .d_model = 1024, .heads = 16, .layers = 8}, 8, 8};
const Shape kThroughputShapes[] = {
    {{.vocab_size = 50304, .context = 2048, .d_model = 2048, .heads = 16, .layers = 8}, 8, 4},
    {{.vocab_size = 50304, .context = 2048, .d_model = 4096, .heads = 32, .layers = 4}, 8, 4}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Megatron-LM's model FLOPs per step (forward and backward, full attention matrices):
// 72 B s l h^2 (1 + s / 6h + V / 12 l h), B the sequences of a step.
double model_flops(const Shape& s) {
  const double b = static_cast<double>(s.micro_batch * s.micro_batches);
  const double seq = static_cast<double>(s.gpt.context), l = static_cast<double>(s.gpt.layers);
  const double h = static_cast<double>(s.gpt.d_model), v = static_cast<double>(s.gpt.vocab_size);
  return 72 * b * seq * l * h * h * (1 + seq / (6 * h) + v / (12 * l * h));
}

std::shared_ptr<data::TensorDataset> random_tokens(const Shape& s) {
  const int64_t samples = s.micro_batch * s.micro_batches;
  return std::make_shared<data::TensorDataset>(
      module::Activation{at::randint(s.gpt.vocab_size, {samples, s.gpt.context}, at::kLong)},
      module::Activation{at::randint(s.gpt.vocab_size, {samples, s.gpt.context}, at::kLong)});
}

engine::TrainingConfig bf16_config(const Shape& s) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = s.micro_batch;
  config.gradient_accumulation_steps = s.micro_batches;
  config.steps_per_print = 1 << 30;
  config.precision.dtype = optim::Precision::kBf16;
  config.optimizer = {"AdamW", {{"lr", kLearningRate}, {"weight_decay", 0.0}}};
  config.device = device::DeviceKind::kCuda;
  return config;
}

// What the engine does for a step on one stage, written out as a plain loop: a bf16
// model, fp32 masters stepped by fused AdamW, the loss in fp32 scaled by 1 / M.
class PlainLoop {
 public:
  PlainLoop(const Shape& s, std::shared_ptr<data::TensorDataset> data)
      : shape_(s),
        model_(models::gpt_layers(s.gpt), models::gpt_loss(), {}),
        data_(std::make_unique<data::DataLoader>(std::move(data), s.micro_batch, 1, 0)) {
    model_.to(at::Device(at::kCUDA, 0));
    model_.to(at::kBFloat16);
    for (const auto& p : model_.parameters()) {
      params_.push_back(p);
      masters_.push_back(p.detach().to(at::kFloat).clone().requires_grad_(true));
    }
    adam_ = std::make_unique<optim::FusedAdamW>(
        masters_, torch::optim::AdamWOptions(kLearningRate).weight_decay(0.0));
  }

  double step() {
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions(at::kDouble).device(at::kCUDA));
    for (int i = 0; i < shape_.micro_batches; ++i) {
      engine::MicroBatch batch = data_.next();
      module::Activation inputs, labels;
      for (auto& t : batch.inputs) inputs.push_back(t.pin_memory().to(at::kCUDA, true));
      for (auto& t : batch.labels) labels.push_back(t.pin_memory().to(at::kCUDA, true));
      module::Activation outputs = model_.forward(inputs);
      for (auto& t : outputs) t = t.to(at::kFloat);
      const at::Tensor loss = model_.loss(outputs, labels);
      loss_sum += loss.detach().to(at::kDouble);
      (loss / shape_.micro_batches).backward();
    }
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      masters_[i].mutable_grad() = params_[i].grad().to(at::kFloat);
      params_[i].mutable_grad() = at::Tensor();
    }
    adam_->step();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      params_[i].copy_(masters_[i]);
      masters_[i].mutable_grad() = at::Tensor();
    }
    return loss_sum.item<double>() / shape_.micro_batches;
  }

 private:
  Shape shape_;
  module::PipelineModule model_;
  data::RepeatingLoader data_;
  std::vector<at::Tensor> params_, masters_;
  std::unique_ptr<optim::FusedAdamW> adam_;
};

struct Engine {
  std::shared_ptr<module::PipelineModule> module;
  std::unique_ptr<engine::PipelineEngine> engine;
  std::unique_ptr<data::RepeatingLoader> data;
};

Engine make_engine(const Shape& s, const std::shared_ptr<comm::MpiCommunicator>& comm,
                   std::shared_ptr<data::TensorDataset> data) {
  const int stages = comm->size();
  auto grid =
      std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(stages, 1), comm);
  Engine e;
  e.module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(s.gpt), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = stages, .stage_id = grid->stage_id()});
  e.engine = std::make_unique<engine::PipelineEngine>(e.module, grid, bf16_config(s));
  e.engine->set_progress_report(false);
  e.data = std::make_unique<data::RepeatingLoader>(
      std::make_unique<data::DataLoader>(std::move(data), s.micro_batch, 1, 0));
  return e;
}

double seconds_of(const std::function<void()>& step) {
  const auto start = Clock::now();
  step();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "GPT d 1024, 8 layers, context 1024, bf16, 8 micro-batches of 8, 1 stage", for the figures.
std::string describe(const Shape& s) {
  char text[160];
  std::snprintf(text, sizeof text,
                "GPT d %lld, %lld layers, context %lld, bf16, %d micro-batches of %lld, 1 stage",
                static_cast<long long>(s.gpt.d_model), static_cast<long long>(s.gpt.layers),
                static_cast<long long>(s.gpt.context), s.micro_batches,
                static_cast<long long>(s.micro_batch));
  return text;
}

void overhead(const Shape& s, const std::shared_ptr<comm::MpiCommunicator>& alone) {
  const auto data = random_tokens(s);
  PlainLoop plain(s, data);
  Engine e = make_engine(s, alone, data);
  std::vector<double> plain_s, engine_s;
  double plain_loss = 0, engine_loss = 0;
  for (int i = 0; i < 2; ++i) {  // warm-up: kernels chosen, memory cached
    plain_loss = plain.step();
    engine_loss = e.engine->train_batch(e.data.get());
  }
  for (int r = 0; r < kRepetitions; ++r) {
    auto time_plain = [&] { plain_s.push_back(seconds_of([&] { plain.step(); })); };
    auto time_engine = [&] {
      engine_s.push_back(seconds_of([&] { e.engine->train_batch(e.data.get()); }));
    };
    if (r % 2 == 0) {
      time_plain();
      time_engine();
    } else {
      time_engine();
      time_plain();
    }
  }
  std::printf(
      "(a) %s, %d interleaved repetitions:\n    plain loop %.4f s, engine %.4f s per step: engine "
      "/ plain = %.3f (per repetition:",
      describe(s).c_str(), kRepetitions, median(plain_s), median(engine_s),
      median(engine_s) / median(plain_s));
  for (int r = 0; r < kRepetitions; ++r) std::printf(" %.3f", engine_s[r] / plain_s[r]);
  std::printf("); warm-up losses %.4f / %.4f\n", plain_loss, engine_loss);
}

void throughput(const Shape& s, const std::shared_ptr<comm::MpiCommunicator>& alone) {
  const auto data = random_tokens(s);
  device::reset_gpu_peak_memory(0);
  std::vector<double> plain_s, engine_s;
  double engine_peak = 0;
  {
    Engine e = make_engine(s, alone, data);
    for (int i = 0; i < 2; ++i) e.engine->train_batch(e.data.get());
    engine_peak = static_cast<double>(device::gpu_memory(0)->peak_allocated) / kGiB;
    // Whether a gap to PyTorch eager is the engine's or the model's: the plain loop on the
    // same shape, interleaved with the engine (both held at once).
    PlainLoop plain(s, data);
    plain.step();
    for (int r = 0; r < kRepetitions; ++r) {
      auto time_plain = [&] { plain_s.push_back(seconds_of([&] { plain.step(); })); };
      auto time_engine = [&] {
        engine_s.push_back(seconds_of([&] { e.engine->train_batch(e.data.get()); }));
      };
      if (r % 2 == 0) {
        time_engine();
        time_plain();
      } else {
        time_plain();
        time_engine();
      }
    }
  }
  const double flops = model_flops(s);
  std::printf(
      "(b) %s: engine %.4f s per step, %.1f model TFLOP/s; plain loop %.4f s, %.1f TFLOP/s; "
      "engine / plain = %.3f (%d interleaved repetitions, medians; Megatron's formula, %.1f "
      "TFLOP per step); engine's peak memory %.1f GiB\n",
      describe(s).c_str(), median(engine_s), flops / median(engine_s) / 1e12, median(plain_s),
      flops / median(plain_s) / 1e12, median(engine_s) / median(plain_s), kRepetitions,
      flops / 1e12, engine_peak);
}

// The communicator of pipe `stages` over the world's first ranks (null on the others).
std::shared_ptr<comm::MpiCommunicator> first_ranks(
    const std::shared_ptr<comm::MpiCommunicator>& world, int stages) {
  const bool in = world->rank() < stages;
  auto comm = world->split(in ? 0 : 1, world->rank());
  return in ? comm : nullptr;
}

// One step of `e` where this rank takes part (`e.engine` set), every rank between barriers;
// rank 0's seconds.
double timed_step(Engine& e, const std::shared_ptr<comm::MpiCommunicator>& world) {
  world->barrier();
  const double seconds = seconds_of([&] {
    if (e.engine) e.engine->train_batch(e.data.get());
  });
  world->barrier();
  return seconds;
}

// Pipe 1, 2 and 4 on the one GPU (the world's first 1, 2, 4 ranks), the (a) model: each
// rank's peak memory with one pipe at a time, then the step times with all three held,
// interleaved, and beside them two pipe-1 jobs at once.
void shared_gpu_pipes(const Shape& s, int largest_pipe) {
  auto world = comm::MpiCommunicator::world();
  const auto data = random_tokens(s);
  std::vector<int> pipes;
  for (int p : {1, 2, 4}) {
    if (p <= largest_pipe) pipes.push_back(p);
  }
  std::vector<std::shared_ptr<comm::MpiCommunicator>> comms;
  for (int p : pipes) comms.push_back(first_ranks(world, p));
  const int gpu = 0;              // the one GPU every rank shares
  std::vector<at::Tensor> peaks;  // per pipe: every rank's peak GiB
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    device::reset_gpu_peak_memory(gpu);
    const int64_t before = device::gpu_memory(gpu)->allocated;
    {
      Engine e = comms[i] ? make_engine(s, comms[i], data) : Engine{};
      for (int k = 0; k < 2; ++k) timed_step(e, world);
    }
    const int64_t peak = comms[i] ? device::gpu_memory(gpu)->peak_allocated - before : 0;
    peaks.push_back(world->all_gather(at::tensor({peak})));
  }
  std::vector<Engine> engines;
  for (std::size_t i = 0; i < pipes.size(); ++i)
    engines.push_back(comms[i] ? make_engine(s, comms[i], data) : Engine{});
  // Last, two pipe-1 jobs at once on ranks 0 and 1, nothing passing between them: what
  // sharing the GPU between two processes costs by itself.
  const auto solo = world->split(world->rank(), 0);
  engines.push_back(world->rank() < 2 ? make_engine(s, solo, data) : Engine{});
  std::vector<std::vector<double>> seconds(engines.size());
  for (auto& e : engines) timed_step(e, world);  // warm-up with all held
  for (int r = 0; r < kRepetitions; ++r) {
    for (std::size_t k = 0; k < engines.size(); ++k) {
      const std::size_t i = (k + r) % engines.size();  // a rotating order
      seconds[i].push_back(timed_step(engines[i], world));
    }
  }
  if (world->rank() != 0) return;
  const double one = median(seconds[0]);
  std::printf("(c) the (a) model on the one GPU, %d interleaved repetitions, medians:\n",
              kRepetitions);
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    std::printf("    pipe %d (%s): %.4f s per step = %.2fx pipe 1's time; peak GiB per rank",
                pipes[i], engines[i].engine->pipe_transports().c_str(), median(seconds[i]),
                median(seconds[i]) / one);
    for (int rank = 0; rank < pipes[i]; ++rank)
      std::printf(" %.1f", static_cast<double>(peaks[i][rank][0].item<int64_t>()) / kGiB);
    std::printf("\n");
  }
  const double pair = median(seconds.back());
  std::printf(
      "    two pipe-1 jobs at once (ranks 0 and 1, nothing between them): %.4f s per step = "
      "%.2fx pipe 1's time (2x: the GPU shared fairly)\n",
      pair, pair / one);
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 4 || device::visible_gpus() == 0) {
      if (world->rank() == 0) std::fprintf(stderr, "gpu_bench needs 4 ranks and a GPU\n");
      return 2;
    }
    const std::string only = argc > 1 ? argv[1] : "";
    const int n = argc > 2 ? std::atoi(argv[2]) : -1;   // -1: every shape, every pipe
    const auto alone = world->split(world->rank(), 0);  // (a) and (b): rank 0 by itself
    if (world->rank() == 0 && (only.empty() || only == "a")) overhead(kOverheadShape, alone);
    world->barrier();
    if (world->rank() == 0 && (only.empty() || only == "b")) {
      for (int i = 0; i < 2; ++i) {
        if (n < 0 || n == i) throughput(kThroughputShapes[i], alone);
      }
    }
    world->barrier();
    if (only.empty() || only == "c") shared_gpu_pipes(kOverheadShape, n < 0 ? 4 : n);
    return 0;
  });
}
