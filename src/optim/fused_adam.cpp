#include "optim/fused_adam.h"

#include <ATen/ATen.h>

#include <vector>

namespace pipetrain::optim {
namespace {

// One group's tensors in the kernels' layout, each parameter's state made on first use.
struct AdamLists {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<double> steps;  // after this step
};

template <typename State>
AdamLists gather(torch::optim::OptimizerParamGroup& group,
                 decltype(std::declval<torch::optim::Optimizer&>().state())& states) {
  AdamLists lists;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto& slot = states[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto state = std::make_unique<State>();
      state->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
      state->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
      slot = std::move(state);
    }
    auto& state = static_cast<State&>(*slot);
    state.step(state.step() + 1);
    lists.params.push_back(p);
    lists.grads.push_back(p.grad());
    lists.exp_avgs.push_back(state.exp_avg());
    lists.exp_avg_sqs.push_back(state.exp_avg_sq());
    lists.steps.push_back(static_cast<double>(state.step()));
  }
  return lists;
}

// The step counts as the kernels take them: float tensors on the parameters' device, in one
// copy from pinned memory that the host does not wait for.
std::vector<at::Tensor> step_tensors(const AdamLists& lists) {
  if (lists.params.empty()) return {};
  const at::Device device = lists.params.front().device();
  at::Tensor steps = at::tensor(lists.steps, at::kFloat);
  if (device.is_cuda()) steps = steps.pin_memory().to(device, /*non_blocking=*/true);
  return steps.unbind(0);
}

template <typename State, typename Options, typename Kernel>
void fused_step(torch::optim::Optimizer& optimizer, Kernel kernel) {
  at::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const Options&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "the fused Adam kernels run here without amsgrad");
    const AdamLists lists = gather<State>(group, optimizer.state());
    if (lists.params.empty()) continue;
    const auto [beta1, beta2] = o.betas();
    kernel(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, std::vector<at::Tensor>{},
           step_tensors(lists), o.lr(), beta1, beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false,
           /*maximize=*/false, std::nullopt, std::nullopt);
  }
}

}  // namespace

at::Tensor FusedAdam::step(LossClosure closure) {
  TORCH_CHECK(!closure, "FusedAdam takes no closure");
  fused_step<torch::optim::AdamParamState, torch::optim::AdamOptions>(
      *this, [](auto&&... args) { at::_fused_adam_(args...); });
  return {};
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  TORCH_CHECK(!closure, "FusedAdamW takes no closure");
  fused_step<torch::optim::AdamWParamState, torch::optim::AdamWOptions>(
      *this, [](auto&&... args) { at::_fused_adamw_(args...); });
  return {};
}

}  // namespace pipetrain::optim
