#include "trainer/calibration/calibration.h"

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/models/gpt/gpt.h"
#include "pipetrain/optim/optimizer.h"
#include "planner/layer_cost.h"
#include "planner/prediction.h"
#include "trainer/job.h"

namespace pipetrain::trainer {
namespace {

// The median of `repeats` timings of `work`, after one warm-up run.
double median_seconds(int repeats, const std::function<void()>& work) {
  work();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The best float32 FLOP/s of products shaped as a d-384 GPT's on 512 tokens, and a square.
double matmul_flops() {
  double best = 0;
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {512, 384, 1152}, {512, 384, 1536}, {512, 1536, 384}, {1024, 1024, 1024}}) {
    const at::Tensor a = at::randn({m, k}), b = at::randn({k, n});
    const double seconds = median_seconds(9, [&] { (void)at::matmul(a, b); });
    best = std::max(best, 2.0 * static_cast<double>(m * k * n) / seconds);
  }
  return best;
}

// Seconds of one forward and backward pass through `layers` of a GPT of `config` on
// `batch` samples (the loss on the last layer's output summed).
double passes_seconds(const models::GptConfig& config, int64_t batch, int first, int end,
                      int repeats) {
  const auto specs = models::gpt_layers(config);
  std::vector<module::Layer> layers;
  for (int i = first; i < end; ++i) layers.push_back(specs.at(i).build());
  const at::Tensor x = first == 0
                           ? at::randint(config.vocab_size, {batch, config.context}, at::kLong)
                           : at::randn({batch, config.context, config.d_model});
  return median_seconds(repeats, [&] {
    module::Activation a{first == 0 ? x : x.clone().requires_grad_(true)};
    for (const auto& layer : layers) a = layer.forward(a);
    a.at(0).sum().backward();
  });
}

// Bytes per second Adam streams: per parameter it reads the parameter, gradient and two
// moments and writes the parameter and the moments (the planner's 28 bytes).
double optimizer_bandwidth() {
  const int64_t n = 4 << 20;
  at::Tensor p = at::randn({n}).requires_grad_(true);
  p.mutable_grad() = at::randn({n});
  const auto optimizer = optim::make_optimizer({}, {p});
  const double seconds = median_seconds(11, [&] { optimizer->step(); });
  return 28.0 * static_cast<double>(n) / seconds;
}

// Bytes per second GELU streams over a 512-token activation of width 1536 (read and write).
double activation_bandwidth() {
  const at::Tensor x = at::randn({512, 1536});
  const double seconds = median_seconds(21, [&] { (void)at::gelu(x); });
  return 2.0 * 4 * static_cast<double>(x.numel()) / seconds;
}

struct Compute {
  double peak = 0;
  double efficiency = 1;
  double half_width = 0;
  double layer_overhead = 0;
};

// Achieved FLOP/s of a GPT block of width d on 512 tokens, its pass overheads and its
// memory-bound work (the planner's traffic at `bandwidth`, backward twice forward) removed.
double block_flops(int64_t d, int64_t heads, double overhead, double bandwidth) {
  const models::GptConfig config{
      .vocab_size = 256, .context = 128, .d_model = d, .heads = heads, .layers = 1};
  const int64_t batch = 4;
  const planner::LayerCost cost =
      planner::layer_costs({.type = models::family("gpt"), .gpt = config}).at(1);
  const double flops = batch * (cost.forward_flops + cost.backward_flops());
  const double streaming = 3.0 * batch * cost.traffic_bytes(1, 4) / bandwidth;  // fwd + 2 bwd
  return flops / (passes_seconds(config, batch, 1, 2, 7) - 2 * overhead - streaming);
}

Compute measure_compute(double bandwidth) {
  Compute c;
  c.peak = matmul_flops();
  // A GPT too small for its FLOPs to matter, every kind of layer: what a pass costs beyond
  // them (two passes per layer).
  // (Untied: a tied head's module alone is the embedding.)
  const models::GptConfig tiny{.vocab_size = 8,
                               .context = 4,
                               .d_model = 8,
                               .heads = 1,
                               .layers = 4,
                               .tie_embeddings = false};
  const int layers = static_cast<int>(tiny.layers) + 3;
  c.layer_overhead = passes_seconds(tiny, 1, 0, layers, 21) / (2 * layers);
  // Efficiency at two widths: e(w) = efficiency · w / (w + half_width), solved for both.
  const double narrow = block_flops(96, 4, c.layer_overhead, bandwidth) / c.peak;
  const double wide = block_flops(384, 6, c.layer_overhead, bandwidth) / c.peak;
  c.half_width = std::max(0.0, (wide - narrow) / (narrow / 96 - wide / 384));
  c.efficiency = std::min(1.0, wide * (384 + c.half_width) / 384);
  return c;
}

// Ranks 0 and 1 bounce a message `rounds` times; the seconds of one way.
double one_way_seconds(comm::MpiCommunicator& world, int64_t bytes, int rounds) {
  at::Tensor message = at::zeros({bytes}, at::kByte);
  const int peer = 1 - world.rank();
  return median_seconds(rounds,
                        [&] {
                          if (world.rank() == 0) {
                            world.send(message, peer, 0)->wait();
                            world.recv(message, peer, 0)->wait();
                          } else {
                            world.recv(message, peer, 0)->wait();
                            world.send(message, peer, 0)->wait();
                          }
                        }) /
         2;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Threads that spin until destroyed, crowding the cores.
class Spinners {
 public:
  explicit Spinners(unsigned count) {
    for (unsigned i = 0; i < count; ++i) {
      threads_.emplace_back([this] {
        for (volatile uint64_t spins = 0; !stop_.load(std::memory_order_relaxed);)
          spins = spins + 1;
      });
    }
  }
  ~Spinners() {
    stop_ = true;
    for (auto& thread : threads_) thread.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Ranks 0 and 1 (only): the median seconds from a send to the end of its receive when the
// receiver has waited 3 ms (yield-polling, as a stage waiting for its neighbour's pass
// does), with half the machine's cores' worth of spinning threads beside each of the two
// when `crowded` (runnable threads then outnumber the cores). The clock is the machine's,
// shared by both ranks; rank 1 knows the answer.
double woken_receive_seconds(comm::MpiCommunicator& world, bool crowded) {
  const Spinners spinners(crowded ? std::max(1u, std::thread::hardware_concurrency() / 2) : 0);
  at::Tensor stamp = at::zeros({1}, at::kDouble);
  at::Tensor ready = at::zeros({1}, at::kByte);
  std::vector<double> delays;
  for (int round = 0; round < 21; ++round) {
    if (world.rank() == 0) {
      world.recv(ready, 1, 1)->wait();  // rank 1 is about to wait
      for (const double until = now_seconds() + 3e-3; now_seconds() < until;) {
      }
      stamp.fill_(now_seconds());
      world.send(stamp, 1, 0)->wait();
    } else {
      world.send(ready, 0, 1)->wait();
      world.recv(stamp, 0, 0)->wait();
      delays.push_back(now_seconds() - stamp.item<double>());
    }
  }
  if (delays.empty()) return 0;
  std::nth_element(delays.begin(), delays.begin() + delays.size() / 2, delays.end());
  return delays[delays.size() / 2];
}

double physical_memory() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

// The median seconds of a training step of `job`, the slowest rank's, after a warm-up.
double step_seconds(Job& job, int steps) {
  at::Tensor seconds = at::tensor(
      {median_seconds(steps, [&] { job.engine->train_batch(job.train_data.get()); })}, at::kDouble);
  job.grid->world_comm()->all_reduce(seconds, comm::ReduceOp::kMax);
  return seconds.item<double>();
}

// What the engine adds beyond layers, links and the optimizer: a tiny GPT on a pipeline of
// every rank, trained at 2 and at 16 micro-batches; the planner's prediction without
// overheads subtracted, the rest split into a cost per pass (how the predicted step grows
// per unit of pass overhead, at each micro-batch count) and a cost per step.
void measure_engine_overheads(planner::Cluster& c) {
  const int ranks = comm::MpiCommunicator::world()->size();
  struct Point {
    double left = 0;    // measured minus predicted without overheads, seconds
    double passes = 0;  // seconds the prediction grows per second of pass overhead
  };
  std::vector<Point> points;
  for (int64_t micro_batches : {2, 16}) {
    const nlohmann::json config = {
        {"model",
         {{"type", "gpt"},
          {"context", 4},
          {"d_model", 8},
          {"heads", 1},
          {"layers", std::max(4, ranks)}}},  // a layer or more for every stage
        {"pipeline", {{"stages", ranks}}},
        {"train_micro_batch_size_per_gpu", 1},
        {"gradient_accumulation_steps", micro_batches},
        {"sample", {{"tokens", 0}}}};
    Job job = build_job(config);
    const double measured = step_seconds(job, 9);
    const planner::Workload workload(job.config.model, job.config.engine, job.config.lora);
    const planner::Layout layout{
        .parallel = {.pipe = ranks}, .micro_batch = 1, .micro_batches = micro_batches};
    planner::Cluster bare = c;
    bare.pass_overhead = bare.step_overhead = 0;
    const double base = planner::predict(workload, bare, layout).step_seconds;
    bare.pass_overhead = 1e-3;
    const double grown = planner::predict(workload, bare, layout).step_seconds;
    points.push_back({measured - base, (grown - base) / 1e-3});
  }
  c.pass_overhead =
      std::max(0.0, (points[1].left - points[0].left) / (points[1].passes - points[0].passes));
  c.step_overhead = std::max(0.0, points[0].left - points[0].passes * c.pass_overhead);
}

}  // namespace

planner::Cluster calibrate_machine() {
  auto world = comm::MpiCommunicator::world();
  planner::Cluster c;
  c.name = "this machine, calibrated";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  c.calibrated_on = host;
  c.gpu = false;  // the CPU it measured
  c.sources = {"pipetrain calibrate with " + std::to_string(world->size()) + " rank(s)"};
  c.devices_per_node = std::max(1u, std::thread::hardware_concurrency());
  c.memory_bytes = physical_memory() / static_cast<double>(c.devices_per_node);
  // Every rank measures at once, as they compute in training.
  world->barrier();
  c.memory_bandwidth = optimizer_bandwidth();
  world->barrier();
  c.activation_bandwidth = activation_bandwidth();
  world->barrier();
  const Compute compute = measure_compute(c.activation_bandwidth);
  c.fp32_flops = c.bf16_flops = compute.peak;
  c.efficiency = compute.efficiency;
  c.half_width = compute.half_width;
  c.layer_overhead = compute.layer_overhead;
  world->barrier();
  if (world->size() >= 2 && world->rank() < 2) {
    c.intra_node.latency = one_way_seconds(*world, 8, 41);
    const int64_t big = 4 << 20;
    c.intra_node.bandwidth = static_cast<double>(big) /
                             std::max(1e-9, one_way_seconds(*world, big, 9) - c.intra_node.latency);
    // What sharing the cores adds to a woken receive (ranks 0 and 1 measure; 1 knows).
    const double crowded = woken_receive_seconds(*world, true);
    const double alone = woken_receive_seconds(*world, false);
    c.shared_core_latency = std::max(0.0, crowded - alone);
  } else if (world->size() < 2) {  // no peer: memory copies stand in for MPI's shared memory
    c.intra_node = {c.memory_bandwidth / 2, 0};
  }
  c.inter_node = c.intra_node;
  at::Tensor figures = at::tensor(
      {c.intra_node.latency, c.intra_node.bandwidth, c.shared_core_latency}, at::kDouble);
  world->broadcast(figures, world->size() >= 2 ? 1 : 0);  // rank 1 timed the woken receives
  c.intra_node = c.inter_node = {figures[1].item<double>(), figures[0].item<double>()};
  c.shared_core_latency = figures[2].item<double>();
  // The two-point fit of the engine's overheads swings on a noisy machine: the median of
  // three fits.
  std::vector<planner::Cluster> fits(3, c);
  for (auto& fit : fits) measure_engine_overheads(fit);
  const auto median = [&](auto field) {
    std::vector<double> values;
    for (const auto& fit : fits) values.push_back(field(fit));
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  c.pass_overhead = median([](const planner::Cluster& f) { return f.pass_overhead; });
  c.step_overhead = median([](const planner::Cluster& f) { return f.step_overhead; });
  return c;
}

}  // namespace pipetrain::trainer
