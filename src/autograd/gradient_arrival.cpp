#include "autograd/gradient_arrival.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <stdexcept>
#include <utility>

namespace pipetrain::autograd {
namespace {

// Autograd's hook after AccumulateGrad has updated .grad (what Python's
// register_post_accumulate_grad_hook installs).
class ArrivalHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ArrivalHook(std::function<void()> arrived, const void* owner)
      : arrived_(std::move(arrived)), owner_(owner) {}
  void operator()(const torch::autograd::Variable& /*parameter*/) override { arrived_(); }
  const void* owner() const { return owner_; }

 private:
  std::function<void()> arrived_;
  const void* owner_;
};

}  // namespace

void set_gradient_arrival(const at::Tensor& parameter, std::function<void()> arrived,
                          const void* owner) {
  const auto& present = torch::autograd::impl::post_acc_grad_hooks(parameter);
  if (present && !dynamic_cast<const ArrivalHook*>(present.get())) {
    throw std::logic_error(
        "a parameter already has a post-accumulate-grad hook that is not pipetrain's");
  }
  torch::autograd::impl::set_post_acc_grad_hooks(
      parameter, std::make_unique<ArrivalHook>(std::move(arrived), owner));
}

bool has_gradient_arrival(const at::Tensor& parameter, const void* owner) {
  const auto& present = torch::autograd::impl::post_acc_grad_hooks(parameter);
  const auto* ours = dynamic_cast<const ArrivalHook*>(present.get());
  return ours && ours->owner() == owner;
}

void clear_gradient_arrival(const at::Tensor& parameter, const void* owner) {
  if (has_gradient_arrival(parameter, owner))
    torch::autograd::impl::set_post_acc_grad_hooks(parameter, nullptr);
}

void announce_gradient_arrival(const at::Tensor& parameter) {
  auto& hook = torch::autograd::impl::post_acc_grad_hooks(parameter);
  if (hook) (*hook)(parameter);
}

}  // namespace pipetrain::autograd
