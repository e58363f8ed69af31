// Step time of every schedule the engine executes, next to the simulator's prediction from
// the same run's measured per-instruction costs, on a compute-bound GPT:
//   pipetrain launch -n 2 -- build/bench/schedules_bench [repetitions [small]]
// Two stages, one intra-op thread per rank, GPT d 384, 8 blocks, context 128, vocabulary
// 256, micro-batches of 4 sequences, fp32, AdamW ("small": bench/peers' medium GPT, d 96,
// 4 blocks, context 64, micro-batches of 8). Layers split by blocks ("type:GptBlock"). Every
// configuration is built once, then the repetitions run round-robin over them (interleaved, so
// drift hits all alike). Predicted = the simulator's makespan over the plan with each stage's mean
// measured forward, backward (and weight-gradient) times, plus the end-of-batch reductions and
// optimizer step of the stage that waits least in them (the others wait there for it).
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/schedule/simulator.h"
#include "schedule/measured_costs.h"

namespace {

using namespace pipetrain;
using Clock = std::chrono::steady_clock;
using schedule::OpKind;

constexpr int kStages = 2;
constexpr std::size_t kKinds = 9;  // schedules per micro-batch count, 1f1b first
const models::GptConfig kLarge{
    .vocab_size = 256, .context = 128, .d_model = 384, .heads = 6, .layers = 8, .dropout = 0.0};
const models::GptConfig kSmall{
    .vocab_size = 256, .context = 64, .d_model = 96, .heads = 4, .layers = 4, .dropout = 0.0};
models::GptConfig gpt_config = kLarge;  // the run's: kLarge or kSmall
int64_t micro_batch_size = 4;

struct Variant {
  schedule::Kind schedule;
  int chunks;
  int micro_batches;
};

// One configuration, built once and stepped round-robin with the others.
struct Configuration {
  Variant variant{};
  std::shared_ptr<module::PipelineModule> module;
  std::unique_ptr<engine::PipelineEngine> engine;
  std::unique_ptr<data::RepeatingLoader> data;
  std::vector<double> step_seconds;
  schedule::MeasuredCosts costs{kStages, 1};
  double end_of_batch_seconds = 0;  // this rank's reductions and optimizer step, summed
  double transfer_seconds = 0;      // this rank's sends and receives, summed
};

bool is_transfer(OpKind kind) {
  return schedule::is_send(kind) || schedule::is_recv(kind);
}

bool is_end_of_batch(OpKind kind) {
  return kind == OpKind::kReduceTiedGrads || kind == OpKind::kReduceGrads ||
         kind == OpKind::kOptimizerStep;
}

Configuration build(const Variant& v, const std::shared_ptr<topology::Grid>& grid,
                    const std::shared_ptr<data::TensorDataset>& samples) {
  engine::TrainingConfig config;
  config.train_micro_batch_size_per_gpu = micro_batch_size;
  config.gradient_accumulation_steps = v.micro_batches;
  config.steps_per_print = 1 << 30;
  config.optimizer.type = "AdamW";
  config.pipeline.schedule.kind = v.schedule;
  config.pipeline.partition_method = "type:GptBlock";
  Configuration c;
  c.variant = v;
  c.costs = schedule::MeasuredCosts(kStages, v.chunks);
  c.module = std::make_shared<module::PipelineModule>(
      models::gpt_layers(gpt_config), models::gpt_loss(),
      module::PipelineModuleOptions{.stages = kStages,
                                    .stage_id = grid->stage_id(),
                                    .chunks = v.chunks,
                                    .placement = config.pipeline.schedule.placement(),
                                    .partition_method = config.pipeline.partition_method});
  c.engine = std::make_unique<engine::PipelineEngine>(c.module, grid, config);
  c.engine->set_progress_report(false);
  c.data = std::make_unique<data::RepeatingLoader>(
      std::make_unique<data::DataLoader>(samples, micro_batch_size, 1, 0));
  return c;
}

void step(Configuration& c, comm::Communicator& world) {
  world.barrier();
  c.engine->record_next_batch();
  const auto start = Clock::now();
  c.engine->train_batch(c.data.get());
  c.step_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  const int stage = c.engine->grid().stage_id();
  for (const auto& r : c.engine->take_records()) {
    const double seconds = (r.end_us - r.start_us) / 1e6;
    c.costs.add(stage, r.instruction.kind, seconds);
    if (is_end_of_batch(r.instruction.kind)) c.end_of_batch_seconds += seconds;
    if (is_transfer(r.instruction.kind)) c.transfer_seconds += seconds;
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string label(const Variant& v) {
  std::string name(schedule::name(v.schedule));  // NOLINT
  if (name == "train") name = "1f1b";
  if (v.chunks > 1) name += " x" + std::to_string(v.chunks);
  return name;
}

// The simulator's step time from every stage's measured costs (collective).
double predicted_seconds(const Configuration& c, comm::Communicator& world) {
  const int stage = c.engine->grid().stage_id();
  const schedule::CostModel mine = c.costs.costs();
  const double steps = static_cast<double>(c.step_seconds.size());
  const at::Tensor gathered =
      world.all_gather(at::tensor({mine.forward[stage], mine.backward[stage], mine.weight[stage],
                                   c.end_of_batch_seconds / steps, c.transfer_seconds / steps},
                                  at::kDouble));
  schedule::CostModel costs;
  costs.forward.assign(kStages, 0);
  costs.backward.assign(kStages, 0);
  costs.weight.assign(kStages, 0);
  double tail = gathered[0][3].item<double>();
  for (int s = 0; s < kStages; ++s) {
    costs.forward[s] = gathered[s][0].item<double>();
    costs.backward[s] = gathered[s][1].item<double>();
    costs.weight[s] = gathered[s][2].item<double>();
    tail = std::min(tail, gathered[s][3].item<double>());
  }
  const auto& v = c.variant;
  const auto plan = c.engine->training_plan();
  if (world.rank() == 0) {
    std::printf("  %-15s m %d:", label(v).c_str(), v.micro_batches);
    for (int s = 0; s < kStages; ++s) {
      std::printf(" stage %d F %.1f B %.1f W %.1f end %.1f transfers %.1f ms;", s,
                  1e3 * costs.forward[s], 1e3 * costs.backward[s], 1e3 * costs.weight[s],
                  1e3 * gathered[s][3].item<double>(), 1e3 * gathered[s][4].item<double>());
    }
    std::printf("\n");
  }
  return schedule::simulate(plan, costs).makespan + tail;
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 5;
  if (argc > 2 && std::string(argv[2]) == "small") {
    gpt_config = kSmall;
    micro_batch_size = 8;
  }
  return comm::run_rank(argc, argv, [&] {
    auto world = comm::MpiCommunicator::world();
    auto grid =
        std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(kStages, 1), world);
    at::manual_seed(0);
    const int64_t samples = 64;
    auto data = std::make_shared<data::TensorDataset>(
        module::Activation{
            at::randint(gpt_config.vocab_size, {samples, gpt_config.context}, at::kLong)},
        module::Activation{
            at::randint(gpt_config.vocab_size, {samples, gpt_config.context}, at::kLong)});
    std::vector<Configuration> configurations;
    using schedule::Kind;
    for (int m : {4, 8}) {
      for (const auto& [schedule, chunks] :
           {std::pair{Kind::k1F1B, 1}, std::pair{Kind::kGpipe, 1}, std::pair{Kind::kInterleaved, 2},
            std::pair{Kind::kZbH1, 1}, std::pair{Kind::kZbH2, 1},
            std::pair{Kind::kInterleavedZb, 2}, std::pair{Kind::kLoopedBfs, 2},
            std::pair{Kind::kZbv, 2}, std::pair{Kind::kDualPipeV, 2}}) {
        configurations.push_back(build({schedule, chunks, m}, grid, data));
      }
    }
    for (auto& c : configurations) c.engine->train_batch(c.data.get());  // warm-up
    for (int r = 0; r < repetitions; ++r) {
      for (auto& c : configurations) step(c, *world);
    }

    std::vector<double> predicted;
    std::vector<at::Tensor> peaks;
    for (const auto& c : configurations) {
      predicted.push_back(predicted_seconds(c, *world));
      peaks.push_back(world->all_gather(
          at::tensor({static_cast<double>(c.engine->peak_live_activations())}, at::kDouble)));
    }
    if (world->rank() != 0) return 0;
    std::printf(
        "GPT d %lld, %lld blocks, context %lld, micro-batch %lld; 2 stages, 1 thread per rank; "
        "%d repetitions, interleaved\n",
        static_cast<long long>(gpt_config.d_model), static_cast<long long>(gpt_config.layers),
        static_cast<long long>(gpt_config.context), static_cast<long long>(micro_batch_size),
        repetitions);
    std::printf("%-15s %2s %10s %17s %10s %9s %10s %10s %12s\n", "schedule", "m", "median s",
                "min..max s", "predicted", "meas/pred", "vs 1f1b", "predicted", "peak live");
    for (std::size_t i = 0; i < configurations.size(); ++i) {
      const Configuration& c = configurations[i];
      const std::size_t first = i - i % kKinds;
      const Configuration& base = configurations[first];  // 1f1b at the same m
      const double measured = median(c.step_seconds);
      const auto [low, high] = std::minmax_element(c.step_seconds.begin(), c.step_seconds.end());
      const auto planned = schedule::simulate(c.engine->training_plan(), {});
      char peak[64];
      std::snprintf(
          peak, sizeof peak, "%d,%d (%d,%d)", static_cast<int>(peaks[i][0].item<double>()),
          static_cast<int>(peaks[i][1].item<double>()), planned.stages[0].peak_live_activations,
          planned.stages[1].peak_live_activations);
      std::printf("%-15s %2d %10.3f %8.3f..%-8.3f %10.3f %9.3f %9.3fx %9.3fx %12s\n",
                  label(c.variant).c_str(), c.variant.micro_batches, measured, *low, *high,
                  predicted[i], measured / predicted[i], median(base.step_seconds) / measured,
                  predicted[first] / predicted[i], peak);
    }
    std::printf(
        "vs 1f1b: 1f1b's median step time over this one's (measured), and the same from the "
        "predictions; peak live: activations (chunk activations) the engine held per stage, "
        "in brackets what the plan holds\n");
    return 0;
  });
}
