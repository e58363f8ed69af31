// What sequence parallelism splits, measured: the bytes a LLaMA's forward keeps for backward
// (CPU tensors held after the forward and loss, before backward) on one rank, and at model 2
// with and without sequence parallelism, interleaved, at 2 and at 4 blocks:
//   pipetrain launch -n 2 -- build/bench/sequence_parallel_memory [REPEATS] [CONTEXT]
// The long-context benchmark's LLaMA (d 128, 4 heads, 2 key/value heads, MLP 256,
// vocabulary 256), one sequence, fp32, in training.
//
// With H1, H2 and H2s those three, the activations of the parallel regions (split by heads,
// key/value heads, MLP features and vocabulary) are P at model 1 and P / 2 at model 2, and
// the rest R (the residual stream, the norms' inputs and outputs, the embedding's output,
// the column-parallel linears' inputs: what sequence parallelism splits) is whole on every
// rank without it: H1 = P + R and H2 = P / 2 + R, so P = 2 (H1 - H2) and R = 2 H2 - H1.
// With it, what R became is H2s - P / 2; the goal is R / 2 within 10 %. Per block (half the
// difference between 4 and 2 blocks) that holds exactly where a block's parallel regions
// split exactly; for the whole model R also takes in what does not split (the rotary
// tables, the token ids) and the difference between the one-rank and the vocabulary-
// parallel loss's saved tensors.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "device/cpu_memory.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/topology/grid.h"

namespace {

using namespace pipetrain;

int64_t held() {
  return device::cpu_memory()->allocated;
}

// Bytes the forward and loss keep until backward under `group`.
int64_t kept_for_backward(const models::ModelConfig& config, const tensor_parallel::Group& group) {
  const models::BuiltinModel model = models::make_builtin_model(config, group);
  module::PipelineModule module(
      model.layers, model.loss,
      module::PipelineModuleOptions{.stages = 1, .stage_id = 0, .seed = 5});
  module.train(true);
  at::manual_seed(21);
  const at::Tensor ids = at::randint(config.llama.vocab_size, {1, config.llama.context}, at::kLong);
  const at::Tensor labels = ids.roll(-1, 1);
  const int64_t before = held();
  at::Tensor loss = module.loss(module.forward({ids}), {labels});
  const int64_t kept = held() - before;
  loss.backward();  // frees the graph, as a step does
  return kept;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  return comm::run_rank(argc, argv, [argc, argv] {
    device::count_cpu_memory();
    auto world = comm::MpiCommunicator::world();
    if (world->size() != 2) throw std::runtime_error("run sequence_parallel_memory on 2 ranks");
    const int repeats = argc > 1 ? std::stoi(argv[1]) : 3;
    models::ModelConfig config;
    config.type = models::family("llama");
    config.llama = {.vocab_size = 256,
                    .context = argc > 2 ? std::stoll(argv[2]) : 4096,
                    .d_model = 128,
                    .heads = 4,
                    .num_key_value_heads = 2,
                    .intermediate_size = 256,
                    .layers = 2};
    const auto grid = std::make_shared<topology::Grid>(
        topology::pipe_model_data_parallel_topology(1, 1, 2), world);
    tensor_parallel::Group model2{grid->tensor_comm()};
    tensor_parallel::Group sequence2 = model2;
    sequence2.sequence_parallel = true;
    auto mib = [&](int64_t bytes) {  // the larger over the ranks
      at::Tensor t = at::tensor({static_cast<double>(bytes)}, at::kDouble);
      world->all_reduce(t, comm::ReduceOp::kMax);
      return t.item<double>() / (1 << 20);
    };
    // Per layout (model 1, model 2, model 2 sequence parallel) and block count (2, 4): MiB.
    std::vector<double> kept[3][2];
    const tensor_parallel::Group groups[3] = {tensor_parallel::Group{}, model2, sequence2};
    for (int r = 0; r < repeats; ++r) {
      for (int blocks = 0; blocks < 2; ++blocks) {
        config.llama.layers = 2 + 2 * blocks;
        for (int g = 0; g < 3; ++g)
          kept[g][blocks].push_back(mib(kept_for_backward(config, groups[g])));
      }
    }
    if (world->rank() != 0) return 0;
    std::printf(
        "LLaMA d 128, context %lld, one sequence, fp32: kept for backward per rank (MiB, "
        "medians of %d)\n",
        static_cast<long long>(config.llama.context), repeats);
    auto line = [](const char* what, double h1, double h2, double h2s) {
      const double parallel = 2 * (h1 - h2), rest = 2 * h2 - h1, rest_split = h2s - parallel / 2;
      std::printf(
          "  %-9s model 1 %6.1f, model 2 %6.1f, model 2 sequence parallel %6.1f; "
          "parallel regions %6.1f at model 1; the rest %6.1f without, %6.1f with "
          "sequence parallelism: %.2fx smaller (goal 2x within 10 %%)\n",
          what, h1, h2, h2s, parallel, rest, rest_split, rest / rest_split);
    };
    double at2[3], at4[3];
    for (int g = 0; g < 3; ++g) {
      at2[g] = median(kept[g][0]);
      at4[g] = median(kept[g][1]);
    }
    line("2 blocks", at2[0], at2[1], at2[2]);
    line("4 blocks", at4[0], at4[1], at4[2]);
    line("per block", (at4[0] - at2[0]) / 2, (at4[1] - at2[1]) / 2, (at4[2] - at2[2]) / 2);
    return 0;
  });
}
