#include "autograd/weight_gradient.h"

#include <ATen/ATen.h>

#include <utility>

#include "autograd/gradient_arrival.h"
#include "autograd/weight_grad_store.h"

namespace pipetrain::autograd {
namespace {

void accumulate_grad(at::Tensor& weight, const at::Tensor& grad) {
  const at::NoGradGuard no_grad;
  at::Tensor& slot = weight.mutable_grad();
  if (slot.defined()) {
    slot.add_(grad);
  } else {
    slot = grad;
  }
  announce_gradient_arrival(weight);  // as autograd's accumulation would
}

}  // namespace

at::Tensor weight_gradient(std::function<at::Tensor()> compute, const at::Tensor& weight) {
  WeightGradStore* store = deferring_store();
  if (!store || !weight.is_leaf()) return compute();
  store->defer([compute = std::move(compute), weight = at::Tensor(weight)]() mutable {
    accumulate_grad(weight, compute());
  });
  return {};
}

}  // namespace pipetrain::autograd
