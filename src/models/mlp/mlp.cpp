#include "pipetrain/models/mlp/mlp.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <algorithm>

#include "autograd/linear.h"
#include "models/layer_rules.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::models {
namespace {

// A torch::nn::Linear run through pipetrain's linear, so that schedules that split backward
// defer its weight gradient as they do the GPT's.
module::LayerSpec linear_layer(int64_t in, int64_t out) {
  module::LayerSpec spec;
  spec.type = "Linear";
  spec.count_parameters = [=] { return in * out + out; };
  spec.build = [=] {
    auto linear = torch::nn::Linear(in, out).ptr();
    return module::Layer{
        linear, [linear](const module::Activation& x) {
          return module::Activation{autograd::linear(x.at(0), linear->weight, linear->bias)};
        }};
  };
  return spec;
}

}  // namespace

std::vector<module::LayerSpec> mlp_layers(const MlpConfig& c) {
  if (c.inputs < 1 || c.hidden < 1 || c.outputs < 1 || c.layers < 1) {
    throw io::InputError("model: inputs, hidden, outputs and layers must be at least 1");
  }
  require_size(c.inputs, "inputs", kMaxTokens);
  require_size(c.hidden, "hidden", kMaxTokens);
  require_size(c.outputs, "outputs", kMaxTokens);
  const double widest = static_cast<double>(std::max({c.inputs, c.hidden, c.outputs}));
  require_countable(static_cast<double>(c.layers) * widest * widest);
  std::vector<module::LayerSpec> specs;
  for (int64_t i = 0; i < c.layers; ++i) {
    const int64_t in = i == 0 ? c.inputs : c.hidden;
    const int64_t out = i == c.layers - 1 ? c.outputs : c.hidden;
    specs.push_back(linear_layer(in, out));
    if (i + 1 < c.layers) {
      specs.push_back(module::function_layer("ReLU", [](const module::Activation& x) {
        return module::Activation{at::relu(x.at(0))};
      }));
    }
  }
  return specs;
}

module::LossFunction mlp_loss(const MlpConfig& c) {
  if (c.task == "regression") {
    return [](const module::Activation& out, const module::Activation& labels) {
      return at::mse_loss(out.at(0), labels.at(0));
    };
  }
  if (c.task == "classification") {
    return [](const module::Activation& out, const module::Activation& labels) {
      return at::cross_entropy_loss(out.at(0), labels.at(0));
    };
  }
  throw io::InputError("model.task must be \"regression\" or \"classification\", got \"" + c.task +
                       "\"");
}

}  // namespace pipetrain::models
