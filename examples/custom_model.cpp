// Train your own model with pipetrain's C++ API: describe it as layer specs, let the
// PipelineModule build this rank's share, and drive the PipelineEngine.
//
//   build/src/pipetrain launch -n 2 -- build/examples/custom_model [config.json]
//
// Two ranks form a 2-stage pipeline (or 1 stage x 2 replicas with "pipeline": {"stages": 1}).
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/config/config_section.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/schedule/schedule_config.h"
#include "pipetrain/topology/parallel_layout.h"

using namespace pipetrain;

namespace {

// y = sin(x0) + x1 * x2 plus noise: something a small MLP can learn.
std::shared_ptr<data::TensorDataset> synthetic_data(int64_t samples) {
  at::manual_seed(0);
  const at::Tensor x = at::rand({samples, 3}) * 4 - 2;
  const at::Tensor y = (at::sin(x.select(1, 0)) + x.select(1, 1) * x.select(1, 2)).unsqueeze(1) +
                       0.01 * at::randn({samples, 1});
  return std::make_shared<data::TensorDataset>(module::Activation{x}, module::Activation{y});
}

std::vector<module::LayerSpec> model() {
  auto linear = [](int64_t in, int64_t out) {
    return module::module_layer<torch::nn::Linear>("Linear",
                                                   [=] { return torch::nn::Linear(in, out); });
  };
  auto tanh = module::function_layer(
      "Tanh", [](const module::Activation& x) { return module::Activation{at::tanh(x[0])}; });
  return {linear(3, 64), tanh, linear(64, 64), tanh, linear(64, 64), tanh, linear(64, 1)};
}

// The config when none is given.
nlohmann::json defaults() {
  return nlohmann::json::parse(R"({
    "train_batch_size": 64, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
    "steps_per_print": 100, "wall_clock_breakdown": true,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 20, "warmup_max_lr": 0.003}},
    "pipeline": {"stages": 2, "partition_method": "parameters"}})");
}

// The engine's keys and the layout's (pipeline.stages), read through one table.
struct ExampleConfig {
  engine::TrainingConfig training;
  topology::ParallelLayout layout{.data = 0};  // data 0: what the ranks leave
};

ExampleConfig config_from(int argc, char** argv) {
  config::KeyTable<ExampleConfig> keys;
  keys.include(engine::training_keys(), PIPETRAIN_FIELD(training))
      .include(topology::layout_keys(), PIPETRAIN_FIELD(layout))
      .check([](const ExampleConfig& c) {
        // This program runs pipe x data over one chunk per stage: a key asking for more
        // would be read and not done.
        const topology::ParallelLayout& l = c.layout;
        if (l.tensor > 1 || l.context > 1 || l.expert > 1 || l.chunks > 1) {
          throw io::InputError(
              "model_parallel, context_parallel, expert_parallel and pipeline.chunks: this "
              "example runs pipe x data over one chunk per stage");
        }
        schedule::check_schedule(c.training.pipeline.schedule, l.pipe, l.chunks);
      });
  nlohmann::json json = argc > 1 ? config::read_json_file(argv[1]) : defaults();
  config::accept_alias(json, "bfloat16", "bf16");  // DeepSpeed reads both
  ExampleConfig config;
  config::refuse_unknown_keys(keys.read(json, config), keys.names());
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    const ExampleConfig read = config_from(argc, argv);
    const engine::TrainingConfig& config = read.training;
    auto world = comm::MpiCommunicator::world();
    const int stages = static_cast<int>(read.layout.pipe);
    // The layout against the job's ranks (data_parallel, where given, must agree).
    topology::resolve_layout(read.layout, world->size());
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_data_parallel_topology(stages, world->size() / stages), world);

    auto module = std::make_shared<module::PipelineModule>(
        model(),
        [](const module::Activation& out, const module::Activation& y) {
          return at::mse_loss(out[0], y[0]);
        },
        module::PipelineModuleOptions{.stages = stages,
                                      .stage_id = grid->stage_id(),
                                      .partition_method = config.pipeline.partition_method,
                                      .seed = static_cast<uint64_t>(config.seed)});
    engine::PipelineEngine engine(module, grid, config);

    // Each replica reads its shard; the loader restarts when the data runs out.
    const auto& resolved = engine.config();
    data::RepeatingLoader data(std::make_unique<data::DataLoader>(
        synthetic_data(4096), resolved.train_micro_batch_size_per_gpu, grid->data_parallel_size(),
        grid->data_parallel_id(),
        /*shuffle=*/true, /*seed=*/1));
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      last = engine.train_batch(&data);
      if (step == 0) first = last;
    }
    const double held_out = engine.eval_batch(&data).loss;
    if (grid->global_rank() == 0) {
      std::printf("loss fell from %.4f to %.4f (evaluation batch: %.4f)\n", first, last, held_out);
    }
    return last < first ? 0 : 1;
  });
}
