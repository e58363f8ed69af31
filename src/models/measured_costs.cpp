#include "models/measured_costs.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "device/cpu_memory.h"
#include "pipetrain/models/builtin_model.h"

namespace pipetrain::models {
namespace {

using Clock = std::chrono::steady_clock;

// What one layer did over one micro-batch, in bytes and seconds.
struct LayerRun {
  int64_t parameters = 0;
  int64_t largest_tensor = 0;
  int64_t kept = 0;       // held after its forward (its output among them)
  int64_t loss_kept = 0;  // held after the loss on top (the last layer)
  int64_t in_flight = 0;  // the most held during its backward beyond its start
  int64_t output = 0;     // elements handed on
  double forward_seconds = 0;
  double backward_seconds = 0;
};

int64_t held_now() {
  return device::cpu_memory()->allocated;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The layer's input as a pipeline stage receives it: floating tensors ask for gradients.
module::Activation received(const module::Activation& output) {
  module::Activation input;
  for (const at::Tensor& t : output) {
    at::Tensor copy = t.detach();
    if (copy.is_floating_point()) copy.requires_grad_(true);
    input.push_back(copy);
  }
  return input;
}

// The labels a batch of `batch` samples trains towards.
comm::TensorList labels_for(const BuiltinModel& model, int64_t batch) {
  if (const TokenInput* tokens = model.tokens())
    return {at::randint(tokens->vocab_size, {batch, tokens->context}, at::kLong)};
  return {at::randn({batch, model.features()->outputs})};
}

// Every layer of the model built once (a tied module's later uses share its first build).
std::vector<module::Layer> build_layers(const BuiltinModel& model) {
  std::map<std::string, module::Layer> tied;
  std::vector<module::Layer> layers;
  for (const module::LayerSpec& spec : model.layers) {
    module::Layer layer;
    if (spec.tied() && tied.contains(spec.tie_key)) {
      layer = tied.at(spec.tie_key);
      if (spec.tied_forward) {
        layer.forward = [&spec, module = layer.module](const module::Activation& in) {
          return spec.tied_forward(*module, in);
        };
      }
    } else {
      layer = spec.build();
      if (spec.tied()) tied.emplace(spec.tie_key, layer);
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

// The model's forward as a stage runs it, over a micro-batch of `batch` samples: what each
// layer adds to what is held (what its backward keeps, its output, less its input where
// nothing keeps that), and on the last the loss's.
void run_forward(const BuiltinModel& model, const std::vector<module::Layer>& layers, int64_t batch,
                 std::vector<LayerRun>& runs) {
  at::manual_seed(0);
  module::Activation x = model.sample_input(batch);
  const comm::TensorList labels = labels_for(model, batch);
  int64_t before = held_now();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    x = layers[i].forward(x);  // the previous output is let go: kept only where saved
    const int64_t now = held_now();
    runs[i].kept = now - before;
    before = now;
    for (const at::Tensor& t : x) runs[i].output += t.numel();
  }
  const at::Tensor loss = model.loss(x, labels);
  x.clear();  // the logits are let go: kept only where the loss saved them
  runs.back().loss_kept = held_now() - before;
}

// Each layer's forward and backward on its own (its input as a stage receives it), three
// times with its gradients accumulating as over a step's micro-batches: the fastest times,
// and the most the last backward holds beyond what it starts with (gradients of the layer's
// parameters made beside the accumulated ones among it).
void run_each(const BuiltinModel& model, const std::vector<module::Layer>& layers, int64_t batch,
              std::vector<LayerRun>& runs) {
  constexpr int kRepeats = 3;
  at::manual_seed(0);
  module::Activation x = model.sample_input(batch);
  const comm::TensorList labels = labels_for(model, batch);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const module::Activation input = received(x);
    const bool last = i + 1 == layers.size();
    module::Activation output;
    runs[i].forward_seconds = runs[i].backward_seconds = 1e30;
    for (int repeat = 0; repeat < kRepeats; ++repeat) {
      Clock::time_point start = Clock::now();
      output = layers[i].forward(input);
      runs[i].forward_seconds = std::min(runs[i].forward_seconds, seconds_since(start));
      const at::Tensor loss = last ? model.loss(output, labels) : at::Tensor();
      device::reset_cpu_peak();
      const int64_t start_held = held_now();
      start = Clock::now();
      if (last) {
        loss.backward();
      } else {
        std::vector<at::Tensor> outputs, gradients;
        for (const at::Tensor& t : output) {
          if (!t.requires_grad()) continue;
          outputs.push_back(t);
          gradients.push_back(at::ones_like(t));
        }
        if (!outputs.empty()) torch::autograd::backward(outputs, gradients);
      }
      runs[i].backward_seconds = std::min(runs[i].backward_seconds, seconds_since(start));
      runs[i].in_flight = device::cpu_memory()->peak_allocated - start_held;
    }
    if (layers[i].module) layers[i].module->zero_grad();
    x = output;
  }
}

// Each layer run on a micro-batch of `batch` samples.
std::vector<LayerRun> run_layers(const BuiltinModel& model,
                                 const std::vector<module::Layer>& layers, int64_t batch) {
  std::vector<LayerRun> runs(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].module) continue;
    for (const at::Tensor& p : layers[i].module->parameters()) {
      runs[i].parameters += p.numel();
      runs[i].largest_tensor = std::max(runs[i].largest_tensor, p.numel());
    }
  }
  run_forward(model, layers, batch, runs);
  run_each(model, layers, batch, runs);
  return runs;
}

// This machine's float32 matrix products at width `width`, in FLOP/s.
double matmul_rate(int64_t width) {
  const int64_t n = width;
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  at::mm(a, b);  // warm
  const int repeats = static_cast<int>(std::max<int64_t>(1, (1 << 27) / (n * n * n)));
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < repeats; ++r) at::mm(a, b);
  return 2.0 * static_cast<double>(n * n * n) * repeats / std::max(seconds_since(start), 1e-9);
}

}  // namespace

std::vector<LayerCost> measured_costs(const ModelConfig& config) {
  device::count_cpu_memory();
  const BuiltinModel model = config.type->build(config, {});
  const std::vector<module::Layer> layers = build_layers(model);
  const std::vector<LayerRun> one = run_layers(model, layers, 1),
                              two = run_layers(model, layers, 2);
  std::vector<LayerCost> costs;
  std::map<int64_t, double> rates;  // by width
  for (std::size_t i = 0; i < model.layers.size(); ++i) {
    const module::LayerSpec& spec = model.layers[i];
    const LayerRun& a = one[i];
    const LayerRun& b = two[i];
    LayerCost cost;
    cost.type = spec.type;
    cost.tie_key = spec.tie_key;
    cost.block = spec.block >= 0;
    cost.parameters = b.parameters;
    cost.largest_tensor = b.largest_tensor;
    // Per sample: the second sample's share (float32 elements).
    auto per_sample = [](int64_t two_samples, int64_t one_sample) {
      return std::max(0.0, static_cast<double>(two_samples - one_sample) / 4.0);
    };
    cost.saved = per_sample(b.kept, a.kept);
    cost.workspace = per_sample(b.in_flight, a.in_flight);
    cost.output = static_cast<double>(b.output - a.output);
    if (i + 1 == model.layers.size()) {
      // The logits are let go once the loss has what it keeps (in float32): that part is the
      // loss's, the rest the layer's.
      const double total = per_sample(b.kept + b.loss_kept, a.kept + a.loss_kept);
      cost.saved = std::max(0.0, cost.saved - cost.output);
      cost.split_saved = std::max(0.0, total - cost.saved);
      cost.float32_loss = true;
      cost.output = 1;
    }
    // A gradient built whole beside the one it is added to (an embedding's table): what a
    // backward holds whatever the batch, as large as the layer's parameters.
    const double fixed = static_cast<double>(2 * a.in_flight - b.in_flight);
    cost.dense_gradient =
        cost.parameters > 0 && fixed >= 0.9 * 4.0 * static_cast<double>(cost.parameters);
    // Times per sample (what does not grow with the batch, a call's own cost, drops out: the
    // planner adds its layer overhead), as FLOPs of this machine's matrix products at the
    // layer's width, the width the planner's speed model then reads.
    const int64_t width = std::clamp<int64_t>(
        std::llround(std::sqrt(static_cast<double>(cost.largest_tensor))), 16, 1024);
    cost.width = static_cast<double>(width);
    if (!rates.contains(width)) rates[width] = matmul_rate(width);
    const double rate = rates[width];
    cost.forward_flops = std::max(0.0, b.forward_seconds - a.forward_seconds) * rate;
    cost.backward_input_flops = cost.backward_weight_flops =
        std::max(0.0, b.backward_seconds - a.backward_seconds) / 2 * rate;
    costs.push_back(cost);
  }
  return costs;
}

}  // namespace pipetrain::models
