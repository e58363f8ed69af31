#include "pipetrain/autograd/gradient_arrival.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <utility>

namespace pipetrain::autograd {
namespace {

// Autograd's hook after AccumulateGrad has updated .grad (what Python's
// register_post_accumulate_grad_hook installs).
class ArrivalHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  explicit ArrivalHook(std::function<void()> arrived) : arrived_(std::move(arrived)) {}
  void operator()(const torch::autograd::Variable& /*parameter*/) override { arrived_(); }

 private:
  std::function<void()> arrived_;
};

}  // namespace

void set_gradient_arrival(const at::Tensor& parameter, std::function<void()> arrived) {
  torch::autograd::impl::set_post_acc_grad_hooks(parameter,
                                                 std::make_unique<ArrivalHook>(std::move(arrived)));
}

void clear_gradient_arrival(const at::Tensor& parameter) {
  torch::autograd::impl::set_post_acc_grad_hooks(parameter, nullptr);
}

void announce_gradient_arrival(const at::Tensor& parameter) {
  auto& hook = torch::autograd::impl::post_acc_grad_hooks(parameter);
  if (hook) (*hook)(parameter);
}

}  // namespace pipetrain::autograd
