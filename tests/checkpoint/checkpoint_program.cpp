// Trains a small GPT for some steps, optionally loading a checkpoint first and saving one
// at the end, and prints each step's loss (all 17 digits) and a digest of each rank's
// weights and optimizer state, for checkpoint_test.sh to compare runs:
//   checkpoint_program --pipe P [--model T] --micro-batches M --steps S [--dropout D]
//                      [--zero STAGE] [--load DIR] [--save DIR]
// The data-parallel size is what the ranks leave: ranks / (P x T).
#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "checkpoint/safetensors.h"
#include "io/crc32.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/models/builtin_model.h"
#include "trainer/faults/faults.h"

using namespace pipetrain;

namespace {

std::string argument(int argc, char** argv, const char* flag, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return argv[i + 1];
  }
  return fallback;
}

// CRC-32 over this rank's fp32 masters and their optimizer state, in name order (under
// ZeRO joined from the data-parallel group: collective).
uint32_t digest(engine::PipelineEngine& engine) {
  std::string bytes;
  const auto whole = engine.whole_optimizer_state();
  std::size_t position = 0;
  for (const auto& named : engine.module().named_parameters()) {
    const optim::ParameterState& state = whole.at(position++);
    comm::NamedTensors tensors = {{named.first, state.master}};
    for (const auto& entry : state.optimizer_state) tensors.push_back(entry);
    bytes += checkpoint::encode_safetensors(tensors);
  }
  return io::crc32(bytes);
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    const int pipe = std::stoi(argument(argc, argv, "--pipe", "1"));
    const int tensor = std::stoi(argument(argc, argv, "--model", "1"));
    const int steps = std::stoi(argument(argc, argv, "--steps", "3"));
    const std::string load = argument(argc, argv, "--load", "");
    const std::string save = argument(argc, argv, "--save", "");

    engine::TrainingConfig config;
    config.train_batch_size = 8;
    config.gradient_accumulation_steps = std::stoi(argument(argc, argv, "--micro-batches", "4"));
    config.gradient_clipping = 1.0;
    config.zero.stage = std::stoi(argument(argc, argv, "--zero", "0"));
    config.steps_per_print = 1 << 30;
    config.optimizer = {"AdamW", {{"lr", 0.01}}};
    config.scheduler = {"WarmupLR", {{"warmup_num_steps", 4}, {"warmup_max_lr", 0.01}}};
    models::ModelConfig model_config;
    model_config.gpt = {.vocab_size = 32,
                        .context = 8,
                        .d_model = 16,
                        .heads = 2,
                        .layers = 3,
                        .dropout = std::stod(argument(argc, argv, "--dropout", "0"))};

    auto world = comm::MpiCommunicator::world();
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(pipe, world->size() / (pipe * tensor), tensor),
        world);
    const auto model =
        models::make_builtin_model(model_config, tensor_parallel::Group{grid->tensor_comm()});
    auto module = std::make_shared<module::PipelineModule>(
        model.layers, model.loss,
        module::PipelineModuleOptions{.stages = pipe, .stage_id = grid->stage_id(), .seed = 5});
    engine::PipelineEngine engine(module, grid, config);
    trainer::inject_faults_from_environment(engine);  // PIPETRAIN_FAULT_KILL_IN_SAVE

    at::manual_seed(42);
    auto samples = std::make_shared<data::TensorDataset>(
        module::Activation{at::randint(32, {40, 8}, at::kLong)},
        module::Activation{at::randint(32, {40, 8}, at::kLong)});
    data::RepeatingLoader data(
        std::make_unique<data::DataLoader>(samples, engine.config().train_micro_batch_size_per_gpu,
                                           grid->data_parallel_size(), grid->data_parallel_id(),
                                           /*shuffle=*/true, /*seed=*/3));
    // Each stage's and replica's dropout stream differs (a tensor-parallel group shares
    // one); a checkpoint must carry it over.
    at::manual_seed(100 + grid->stage_id() * grid->data_parallel_size() + grid->data_parallel_id());

    if (!load.empty()) {
      const auto client = checkpoint::load_checkpoint(engine, load, "latest", &data);
      if (grid->global_rank() == 0)
        std::printf("loaded step %lld (%s)\n", static_cast<long long>(engine.global_steps()),
                    client.dump().c_str());
    }
    for (int i = 0; i < steps; ++i) {
      const double loss = engine.train_batch(&data);
      if (grid->global_rank() == 0)
        std::printf("loss %lld %.17g\n", static_cast<long long>(engine.global_steps()), loss);
    }
    if (!save.empty()) {
      checkpoint::save_checkpoint(engine, save, "step_" + std::to_string(engine.global_steps()),
                                  {{"note", "checkpoint_program"}}, &data);
    }
    std::fflush(stdout);
    world->barrier();
    std::printf("digest %d %08x\n", grid->global_rank(), digest(engine));
    return 0;
  });
}
