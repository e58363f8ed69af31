// The pieces under the engine, as docs/user/cpp-api.md shows them, run as one program on 2
// or 4 ranks (pipe 2, the rest data-parallel replicas): a schedule planned, validated and
// simulated; tensors sent between stages and averaged among replicas; a model as layer
// specs with one stage built; an engine's checkpoint saved and loaded.
//
//   build/src/pipetrain launch -n 2 -- build/examples/building_blocks CHECKPOINT_FOLDER
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/comm/tensor_transport.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/schedule/schedule.h"
#include "pipetrain/schedule/simulator.h"
#include "pipetrain/schedule/validator.h"
#include "pipetrain/topology/grid.h"

namespace {

// Torch-free: pipetrain_schedule alone.
double zb_h1_makespan() {
  using namespace pipetrain::schedule;
  // Every stage's instruction stream, as the engine will execute it.
  PipelinePlan plan = plan_pipeline(Kind::kZbH1, {.micro_batches = 8, .stages = 4});
  int passes = 0;
  for (const Step& step : plan.stage_steps[1])                         // stage 1's steps
    for (const Instruction& in : step) passes += is_compute(in.kind);  // in.buffer, in.chunk, ...
  // Validate, then simulate.
  if (auto violation = validate(plan)) throw std::runtime_error(violation->to_string());
  Timeline timeline = simulate(plan, CostModel{});  // makespan, per-stage bubble and memory
  return passes > 0 ? timeline.makespan : 0.0;
}

void exchange(const pipetrain::topology::Grid& grid) {
  using namespace pipetrain;
  // Headers and payloads over the pipe's MPI communicator. route_payloads(peer, comm,
  // rank_there) sends a peer's payloads over a communicator of their own instead (NCCL
  // between two GPUs): the engine does that per pair of neighbouring stages, with
  // device::neighbour_links.
  comm::TensorTransport transport(grid.pipe_comm());
  if (grid.is_first_stage()) {
    transport.send({at::randn({4, 16}), at::ones({4}, at::kLong)}, /*peer=*/1, /*tag=*/1).wait();
  } else {
    std::vector<at::Tensor> received = transport.recv(/*peer=*/0, /*tag=*/1);  // any shapes
    if (received.size() != 2 || received[1].scalar_type() != at::kLong)
      throw std::runtime_error("the pipe delivered other tensors than were sent");
  }
  at::Tensor grads = at::ones({10});
  grid.data_comm()->all_reduce(grads, comm::ReduceOp::kAverage);  // among replicas
}

std::shared_ptr<pipetrain::module::PipelineModule> stage_of(const pipetrain::topology::Grid& grid) {
  namespace module = pipetrain::module;
  std::vector<module::LayerSpec> layers = {
      module::module_layer<torch::nn::Linear>("Linear", [] { return torch::nn::Linear(16, 64); }),
      module::function_layer(
          "ReLU", [](const module::Activation& x) { return module::Activation{at::relu(x[0])}; }),
      module::module_layer<torch::nn::Linear>("Linear", [] { return torch::nn::Linear(64, 1); }),
  };
  auto stage = std::make_shared<module::PipelineModule>(
      layers, [](const auto& out, const auto& labels) { return at::mse_loss(out[0], labels[0]); },
      module::PipelineModuleOptions{.stages = 2,
                                    .stage_id = grid.stage_id(),
                                    .partition_method = "uniform",
                                    .activation_checkpoint_interval = 1});
  return stage;
}

void save_and_load(pipetrain::engine::PipelineEngine& engine, const std::string& folder) {
  pipetrain::checkpoint::save_checkpoint(engine, folder, "step_100", {{"epoch", 3}});  // all ranks
  nlohmann::json client = pipetrain::checkpoint::load_checkpoint(engine, folder, "latest");
  if (client.value("epoch", 0) != 3) throw std::runtime_error("the client state was lost");
}

}  // namespace

int main(int argc, char** argv) {
  return pipetrain::comm::run_rank(argc, argv, [&] {
    using namespace pipetrain;
    if (argc != 2) throw io::InputError("usage: building_blocks CHECKPOINT_FOLDER");
    auto world = comm::MpiCommunicator::world();
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_data_parallel_topology(/*pipe=*/2, world->size() / 2), world);
    const double makespan = zb_h1_makespan();
    exchange(*grid);
    auto stage = stage_of(*grid);
    const module::Activation x{at::randn({4, 16})};
    if (grid->is_first_stage() && stage->forward(x).at(0).size(1) != 64)
      throw std::runtime_error("stage 0 should end with the 64-wide layer");
    engine::TrainingConfig config = engine::parse_training_config(nlohmann::json::parse(
        R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})"));
    engine::PipelineEngine engine(stage, grid, config);
    if (grid->global_rank() == 0) std::filesystem::remove_all(argv[1]);
    world->barrier();
    save_and_load(engine, argv[1]);
    if (grid->global_rank() == 0)
      std::printf("building blocks: ZB-H1 makespan %.1f, tensors moved, checkpoint in %s\n",
                  makespan, argv[1]);
    return 0;
  });
}
