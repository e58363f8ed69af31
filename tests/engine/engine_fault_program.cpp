// A 2-stage job that goes wrong on purpose (see engine_fault_test.sh):
//   exhausted     the data runs out in the second step, without a RepeatingLoader
//   mismatch      stage 0 sends [batch, 5] activations, stage 1 expects [batch, 7]
//   grad-disabled train_batch under NoGradGuard
//   abandoned     as exhausted, with a data-parallel group that answers as NCCL's would:
//                 the failed step fails the job, and the step tried after it is refused
#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <string>

#include "../comm/forwarding_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"

namespace {

// Answers as an NCCL communicator would (its collectives still go over MPI).
class ClaimsNccl final : public pipetrain::testing::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  pipetrain::comm::Transport transport() const override {
    return pipetrain::comm::Transport::kNccl;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return pipetrain::comm::run_rank(argc, argv, [&] {
    using namespace pipetrain;
    auto grid = std::make_shared<topology::Grid>(topology::pipe_data_parallel_topology(2, 1),
                                                 comm::MpiCommunicator::world());
    const int64_t second_width = mode == "mismatch" ? 7 : 5;
    std::vector<module::LayerSpec> layers = {
        module::module_layer<torch::nn::Linear>("Linear", [] { return torch::nn::Linear(4, 5); }),
        module::module_layer<torch::nn::Linear>("Linear",
                                                [=] { return torch::nn::Linear(second_width, 1); }),
    };
    auto module = std::make_shared<module::PipelineModule>(
        layers,
        [](const module::Activation& out, const module::Activation& y) {
          return at::mse_loss(out[0], y[0]);
        },
        module::PipelineModuleOptions{
            .stages = 2, .stage_id = grid->stage_id(), .partition_method = "uniform"});
    engine::TrainingConfig config;
    config.train_micro_batch_size_per_gpu = 2;
    config.gradient_accumulation_steps = 4;
    groups::CommunicatorTesting testing;
    if (mode == "abandoned") {
      testing.wrap = [](std::shared_ptr<comm::Communicator> made, groups::TensorGroup group) {
        return group == groups::TensorGroup::kData ? std::make_shared<ClaimsNccl>(made) : made;
      };
    }
    auto comms = std::make_shared<groups::Communicators>(grid, device::DeviceKind::kCpu,
                                                         comm::Seconds(0), testing);
    engine::PipelineEngine engine(module, comms, config);
    // 12 samples: one step takes 8, the second runs out at its third micro-batch.
    auto data = std::make_shared<data::TensorDataset>(module::Activation{at::randn({12, 4})},
                                                      module::Activation{at::randn({12, 1})});
    data::DataLoader loader(data, 2, 1, 0);
    if (mode == "grad-disabled") {
      at::NoGradGuard no_grad;
      engine.train_batch(&loader);
    }
    if (mode == "abandoned") {
      engine.train_batch(&loader);
      try {
        engine.train_batch(&loader);  // the data runs out
      } catch (const std::exception&) {
      }
      engine.train_batch(&loader);  // refused: the job must end
      return 0;
    }
    for (int step = 0; step < 2; ++step) engine.train_batch(&loader);
    return 0;
  });
}
