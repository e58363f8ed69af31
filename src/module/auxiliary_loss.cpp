#include "module/auxiliary_loss.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <atomic>
#include <stdexcept>

namespace pipetrain::module {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<double> current_scale{1.0};

class AttachLoss : public torch::autograd::Function<AttachLoss> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& activation,
                            const at::Tensor& loss) {
    ctx->saved_data["scale"] = auxiliary_loss_scale();
    ctx->saved_data["loss_type"] = loss.scalar_type();
    ctx->saved_data["loss_device"] = loss.device();
    return activation;  // autograd makes it a view of the input
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto options = at::TensorOptions()
                             .dtype(ctx->saved_data["loss_type"].toScalarType())
                             .device(ctx->saved_data["loss_device"].toDevice());
    return {grads[0], at::full({}, ctx->saved_data["scale"].toDouble(), options)};
  }
};

}  // namespace

at::Tensor with_auxiliary_loss(const at::Tensor& activation, const at::Tensor& loss) {
  if (loss.dim() != 0) throw std::invalid_argument("an auxiliary loss must be a scalar");
  if (!loss.requires_grad()) return activation;
  return AttachLoss::apply(activation, loss);
}

AuxiliaryLossScale::AuxiliaryLossScale(double scale) : previous_(current_scale.exchange(scale)) {}

AuxiliaryLossScale::~AuxiliaryLossScale() {
  current_scale.store(previous_);
}

double auxiliary_loss_scale() {
  return current_scale.load();
}

}  // namespace pipetrain::module
