#include "module/activation_checkpoint.h"

#include "module/auxiliary_loss.h"
#include "module/rng_state.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>

#include <algorithm>
#include <mutex>

namespace pipetrain::module {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the layer function through the autograd context.
struct FunctionHolder : torch::CustomClassHolder {
  explicit FunctionHolder(LayerFunction f) : function(std::move(f)) {}
  LayerFunction function;
};

// The devices whose random streams a function on `inputs` may draw from.
std::vector<at::Device> rng_devices(const variable_list& inputs) {
  std::vector<at::Device> devices{at::kCPU};
  for (const auto& input : inputs) {
    if (input.is_cuda() &&
        std::find(devices.begin(), devices.end(), input.device()) == devices.end()) {
      devices.push_back(input.device());
    }
  }
  return devices;
}

// Restores saved random states for its lifetime, then puts the current ones back.
class ScopedRngStates {
 public:
  ScopedRngStates(const std::vector<at::Device>& devices, const std::vector<at::Tensor>& saved)
      : devices_(devices) {
    for (std::size_t i = 0; i < devices_.size(); ++i) {
      current_.push_back(rng_state(devices_[i]));
      set_rng_state(devices_[i], saved[i]);
    }
  }
  ~ScopedRngStates() {
    for (std::size_t i = 0; i < devices_.size(); ++i) set_rng_state(devices_[i], current_[i]);
  }

 private:
  std::vector<at::Device> devices_;
  std::vector<at::Tensor> current_;
};

thread_local int recomputations = 0;

// Marks this thread as recomputing while alive.
struct Recomputation {
  Recomputation() { ++recomputations; }
  ~Recomputation() { --recomputations; }
  Recomputation(const Recomputation&) = delete;
  Recomputation& operator=(const Recomputation&) = delete;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `parameters` are inputs only so that the outputs require grad whenever the layers'
  // parameters do; their gradients accumulate during the recomputation's own backward.
  // Tensor lists must arrive as at::TensorList: autograd only sees tensors passed so.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<FunctionHolder> holder,
                               at::TensorList input_list, at::TensorList parameters) {
    const variable_list inputs = input_list.vec();
    ctx->saved_data["parameters"] = static_cast<int64_t>(parameters.size());
    std::vector<at::Tensor> states;
    for (const auto& device : rng_devices(inputs)) states.push_back(rng_state(device));
    ctx->saved_data["rng"] = states;
    ctx->saved_data["function"] = at::IValue::make_capsule(holder);
    ctx->saved_data["auxiliary_loss_scale"] = auxiliary_loss_scale();
    ctx->save_for_backward(inputs);
    variable_list outputs;
    {
      at::NoGradGuard no_grad;
      outputs = holder->function(inputs);
    }
    for (const auto& output : outputs) {
      if (!at::isFloatingType(output.scalar_type())) ctx->mark_non_differentiable({output});
    }
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto holder =
        c10::static_intrusive_pointer_cast<FunctionHolder>(ctx->saved_data["function"].toCapsule());
    variable_list inputs = ctx->get_saved_variables();
    for (auto& input : inputs) {
      input = input.detach();
      if (at::isFloatingType(input.scalar_type())) input.requires_grad_(true);
    }
    variable_list outputs;
    {
      ScopedRngStates rng(rng_devices(inputs), ctx->saved_data["rng"].toTensorVector());
      at::AutoGradMode grad(true);
      const Recomputation recomputation;
      // Auxiliary losses attached again weigh what they weighed in the first run.
      const AuxiliaryLossScale scale(ctx->saved_data["auxiliary_loss_scale"].toDouble());
      outputs = holder->function(inputs);
    }
    variable_list differentiable;
    variable_list grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        differentiable.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!differentiable.empty()) torch::autograd::backward(differentiable, grads);
    variable_list input_grads{at::Tensor()};  // none for the holder argument
    for (const auto& input : inputs)
      input_grads.push_back(input.requires_grad() ? input.grad() : at::Tensor());
    input_grads.resize(input_grads.size() + ctx->saved_data["parameters"].toInt());
    return input_grads;
  }
};

}  // namespace

Activation checkpointed(const LayerFunction& function, const Activation& inputs,
                        const std::vector<at::Tensor>& parameters) {
  return CheckpointFunction::apply(c10::make_intrusive<FunctionHolder>(function),
                                   at::TensorList(inputs), at::TensorList(parameters));
}

bool recomputing() {
  return recomputations > 0;
}

}  // namespace pipetrain::module
