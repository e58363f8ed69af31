// A model of your own built from Megatron-style tensor-parallel layers, trained over
// pipe x model (x data) ranks:
//
//   build/src/pipetrain launch -n 4 -- build/examples/tensor_parallel_model 2 2
//
// splits 4 ranks into 2 pipeline stages of 2 tensor-parallel ranks each (the arguments are
// PIPE and MODEL; the ranks left over are data-parallel replicas). Each block's first
// linear layer is split by output features (column-parallel), its second by input features
// (row-parallel), so a block needs one all-reduce forward and one backward, as in
// Megatron's MLP. Every layout starts from the same full weights and trains alike: the
// loss it prints is the one a single process prints (`-n 1 ... 1 1`), to rounding.
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/groups/communicators.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/tensor_parallel/layers.h"

using namespace pipetrain;

namespace {

constexpr int64_t kWidth = 32;

// x + W2 gelu(W1 x): W1 split by rows over the group, W2 by columns; the residual stream
// stays whole (replicated) on every rank of the group.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t width, const tensor_parallel::Group& group)
      : up(register_module("up", tensor_parallel::ColumnParallelLinear(width, 4 * width, group))),
        down(register_module("down", tensor_parallel::RowParallelLinear(4 * width, width, group))) {
  }
  at::Tensor forward(const at::Tensor& x) { return x + down(at::gelu(up(x))); }

  tensor_parallel::ColumnParallelLinear up;
  tensor_parallel::RowParallelLinear down;
};
TORCH_MODULE(Block);

// In (3 features) -> width, four blocks, -> 1 output; every layer knows its group.
std::vector<module::LayerSpec> model(const tensor_parallel::Group& group) {
  std::vector<module::LayerSpec> layers;
  layers.push_back(module::module_layer<tensor_parallel::ColumnParallelLinear>("In", [group] {
    return tensor_parallel::ColumnParallelLinear(3, kWidth, group, tensor_parallel::LinearOptions{},
                                                 1,
                                                 /*gather_output=*/true);
  }));
  for (int i = 0; i < 4; ++i)
    layers.push_back(
        module::module_layer<Block>("Block", [group] { return Block(kWidth, group); }));
  // A plain layer: its weights are replicated over the group (and its gradients agree).
  layers.push_back(
      module::module_layer<torch::nn::Linear>("Out", [] { return torch::nn::Linear(kWidth, 1); }));
  return layers;
}

// y = sin(x0) + x1 * x2: something the blocks can learn.
std::shared_ptr<data::TensorDataset> synthetic_data(int64_t samples) {
  at::manual_seed(0);
  const at::Tensor x = at::rand({samples, 3}) * 4 - 2;
  const at::Tensor y = (at::sin(x.select(1, 0)) + x.select(1, 1) * x.select(1, 2)).unsqueeze(1);
  return std::make_shared<data::TensorDataset>(module::Activation{x}, module::Activation{y});
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [&] {
    const int pipe = argc > 1 ? std::atoi(argv[1]) : 1;
    const int tensor = argc > 2 ? std::atoi(argv[2]) : 1;
    auto world = comm::MpiCommunicator::world();
    if (pipe < 1 || tensor < 1 || world->size() % (pipe * tensor) != 0) {
      throw io::InputError("PIPE x MODEL must divide the job's " + std::to_string(world->size()) +
                           " ranks");
    }
    const int data_parallel = world->size() / (pipe * tensor);
    auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(pipe, data_parallel, tensor), world);

    engine::TrainingConfig config = engine::parse_training_config(nlohmann::json::parse(R"({
      "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
      "optimizer": {"type": "Adam", "params": {"lr": 0.003}}, "device": "cpu"})"));
    // The job's communicators, made once: the model's layers take the tensor-parallel group
    // from them, the engine the rest.
    auto comms = std::make_shared<groups::Communicators>(grid, config.device, comm::Seconds(0));
    auto module = std::make_shared<module::PipelineModule>(
        model(comms->tensor_group()),
        [](const module::Activation& out, const module::Activation& y) {
          return at::mse_loss(out[0], y[0]);
        },
        module::PipelineModuleOptions{.stages = pipe, .stage_id = grid->stage_id()});
    engine::PipelineEngine engine(module, comms, config);

    data::RepeatingLoader data(std::make_unique<data::DataLoader>(
        synthetic_data(1024), engine.config().train_micro_batch_size_per_gpu, data_parallel,
        grid->data_parallel_id()));
    double first = 0, last = 0;
    for (int step = 0; step < 40; ++step) {
      last = engine.train_batch(&data);
      if (step == 0) first = last;
    }
    if (grid->global_rank() == 0) {
      std::printf("pipe %d x data %d x model %d: loss %.6f at step 1, %.6f at step 40\n", pipe,
                  data_parallel, tensor, first, last);
    }
    return last < first ? 0 : 1;
  });
}
