#include "autograd/linear.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "autograd/weight_grad_store.h"
#include "autograd/weight_gradient.h"

namespace pipetrain::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The weight gradient gᵀ x of flattened `g` and `flat_x`, now or deferred.
at::Tensor product_gradient(const at::Tensor& g, const at::Tensor& flat_x,
                            const at::Tensor& weight) {
  return weight_gradient([g, flat_x] { return g.t().mm(flat_x); }, weight);
}

class SplittableLinear : public torch::autograd::Function<SplittableLinear> {
 public:
  // x Wᵀ; the bias is added outside, by ATen's autograd.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x});
    // The parameter itself (not a saved copy), so a deferred gradient lands in its .grad.
    ctx->saved_data["weight"] = weight;
    return at::linear(x, weight);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const at::Tensor g = grads[0].reshape({-1, grads[0].size(-1)});
    at::Tensor input_grad;
    at::Tensor weight_grad;
    if (ctx->needs_input_grad(0)) input_grad = at::matmul(grads[0], weight);
    if (ctx->needs_input_grad(1))
      weight_grad = product_gradient(g, x.reshape({-1, x.size(-1)}), weight);
    return {input_grad, weight_grad};
  }
};

// Carries a SlicedInput from forward to backward.
struct SlicedInputHolder : torch::CustomClassHolder {
  explicit SlicedInputHolder(SlicedInput s) : sliced(std::move(s)) {}
  SlicedInput sliced;
};

class GatheredLinear : public torch::autograd::Function<GatheredLinear> {
 public:
  // gather(x) Wᵀ, saving the slice x only.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const c10::intrusive_ptr<torch::CustomClassHolder>& holder) {
    const auto& sliced = static_cast<SlicedInputHolder&>(*holder).sliced;
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    ctx->saved_data["sliced"] = c10::IValue::make_capsule(holder);
    return at::linear(sliced.gather(x), weight);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor weight = ctx->saved_data["weight"].toTensor();
    const auto& sliced =
        static_cast<SlicedInputHolder&>(*ctx->saved_data["sliced"].toCapsule()).sliced;
    at::Tensor input_grad, weight_grad;
    if (ctx->needs_input_grad(0)) input_grad = sliced.scatter(at::matmul(grads[0], weight));
    if (ctx->needs_input_grad(1)) {
      const at::Tensor whole = sliced.gather(x);  // collective: now, in every rank's order
      weight_grad = product_gradient(grads[0].reshape({-1, grads[0].size(-1)}),
                                     whole.reshape({-1, whole.size(-1)}), weight);
    }
    return {input_grad, weight_grad, at::Tensor()};
  }
};

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                  const SlicedInput& sliced) {
  at::Tensor y;
  if (!at::GradMode::is_enabled()) {
    y = at::linear(sliced.gather(x), weight);
  } else {
    y = GatheredLinear::apply(x, weight,
                              c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(
                                  c10::make_intrusive<SlicedInputHolder>(sliced)));
  }
  return bias.defined() ? y + bias : y;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (!recording_splittable() || !at::GradMode::is_enabled()) return at::linear(x, weight, bias);
  const at::Tensor y = SplittableLinear::apply(x, weight);
  return bias.defined() ? y + bias : y;
}

}  // namespace pipetrain::autograd
