// A model family of your own, trained by pipetrain's own commands: register it, then hand
// the command line to cli::run. A config names it by model.type and gives its sizes under
// model.params; `train`, `eval`, `generate`, `logits` and `partition` then run it with the
// trainer's data, schedules, checkpoints, resume, metrics and faults; `plan` plans it from its
// layers' costs measured on the build (a row giving counted costs would also get the progress
// line's MFU).
//
//   build/src/pipetrain launch -n 2 -- build/examples/registered_model
//       train --config examples/registered_model.json
//   build/examples/registered_model plan --config examples/registered_model.json
//       --cluster clusters/this-machine.json
#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <string>
#include <vector>

#include "pipetrain/cli/run.h"
#include "pipetrain/config/config_section.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/module/layer.h"

namespace {

using namespace pipetrain;

// Token and learned position embeddings.
struct EmbedImpl : torch::nn::Module {
  EmbedImpl(int64_t vocab, int64_t context, int64_t width)
      : tokens(register_module("tokens", torch::nn::Embedding(vocab, width))),
        positions(register_parameter("positions", at::randn({context, width}) * 0.02)) {}
  at::Tensor forward(const at::Tensor& ids) {
    return tokens(ids) + positions.narrow(0, 0, ids.size(1));
  }
  torch::nn::Embedding tokens;
  at::Tensor positions;
};
TORCH_MODULE(Embed);

// x + MLP(norm([x, x one position back])): each position sees itself and the one before.
struct ShiftBlockImpl : torch::nn::Module {
  explicit ShiftBlockImpl(int64_t width)
      : norm(register_module("norm",
                             torch::nn::LayerNorm(torch::nn::LayerNormOptions({2 * width})))),
        up(register_module("up", torch::nn::Linear(2 * width, 4 * width))),
        down(register_module("down", torch::nn::Linear(4 * width, width))) {}
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor before = at::constant_pad_nd(x, {0, 0, 1, 0}).narrow(1, 0, x.size(1));
    return x + down(at::gelu(up(norm(at::cat({x, before}, -1)))));
  }
  torch::nn::LayerNorm norm;
  torch::nn::Linear up, down;
};
TORCH_MODULE(ShiftBlock);

struct HeadImpl : torch::nn::Module {
  HeadImpl(int64_t width, int64_t vocab)
      : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        out(register_module("out", torch::nn::Linear(width, vocab))) {}
  at::Tensor forward(const at::Tensor& x) { return out(norm(x)); }
  torch::nn::LayerNorm norm;
  torch::nn::Linear out;
};
TORCH_MODULE(Head);

// model.params: {"vocab_size", "context", "width", "layers"}, each a positive integer.
struct Sizes {
  int64_t vocab, context, width, layers;
};
Sizes read_sizes(const nlohmann::json& params) {
  const config::ConfigSection p(params, "model.params");
  const std::vector<std::string> unknown =
      p.unknown_keys({"vocab_size", "context", "width", "layers"});
  if (!unknown.empty()) throw io::InputError(unknown.front() + " is not a key of shift_lm");
  auto positive = [&p](const std::string& key, int64_t fallback) {
    const int64_t value = p.get_int(key, fallback);
    if (value < 1 || value > (1 << 20))
      throw io::InputError("model.params." + key + " must be in [1, 1048576], got " +
                           std::to_string(value));
    return value;
  };
  return {positive("vocab_size", 256), positive("context", 64), positive("width", 64),
          positive("layers", 4)};
}

models::BuiltinModel shift_lm(const nlohmann::json& params, const models::ModelGroups& groups) {
  const auto [vocab, context, width, layers] = read_sizes(params);
  std::vector<module::LayerSpec> specs;
  specs.push_back(
      module::module_layer<Embed>("Embed", [=] { return Embed(vocab, context, width); }));
  for (int64_t i = 0; i < layers; ++i)
    specs.push_back(
        module::module_layer<ShiftBlock>("ShiftBlock", [=] { return ShiftBlock(width); }));
  specs.push_back(module::module_layer<Head>("Head", [=] { return Head(width, vocab); }));
  return models::language_model(std::move(specs), groups, vocab, context);
}

}  // namespace

int main(int argc, char** argv) {
  // One row: its name and its build; the planner measures its layers' costs from the build
  // (measure_costs). Without capabilities it splits over no group (no tensor, context or
  // expert parallelism): pipe and data only.
  namespace models = pipetrain::models;
  models::register_family({
      .name = "shift_lm",
      .measure_costs = true,
      .build = [](const models::ModelConfig& c,
                  const models::ModelGroups& groups) { return shift_lm(c.params, groups); },
  });
  return pipetrain::cli::run(argc, argv);
}
