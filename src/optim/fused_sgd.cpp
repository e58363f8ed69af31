#include "pipetrain/optim/fused_sgd.h"

#include <ATen/ATen.h>

#include <vector>

namespace pipetrain::optim {
namespace {

// Parameters stepped by one kernel launch, with their momentum buffers (none without
// momentum).
struct SgdLists {
  std::vector<at::Tensor> params, grads, momentum_buffers;
};

void step_lists(const SgdLists& lists, const torch::optim::SGDOptions& o, bool first_step) {
  if (lists.params.empty()) return;
  at::_fused_sgd_(lists.params, lists.grads, lists.momentum_buffers, o.weight_decay(), o.momentum(),
                  o.lr(), o.dampening(), o.nesterov(), /*maximize=*/false, first_step);
}

}  // namespace

at::Tensor FusedSgd::step(LossClosure closure) {
  TORCH_CHECK(!closure, "FusedSgd takes no closure");
  at::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    // A buffer made now starts as the gradient (LibTorch's first step), which the kernel
    // does when told it is the first step; so new and old buffers go in separate launches.
    SgdLists fresh, running;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      SgdLists* lists = &running;
      if (o.momentum() != 0) {
        auto& slot = state()[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto made = std::make_unique<torch::optim::SGDParamState>();
          made->momentum_buffer(at::empty_like(p, at::MemoryFormat::Preserve));
          slot = std::move(made);
          lists = &fresh;
        }
        lists->momentum_buffers.push_back(
            static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
      }
      lists->params.push_back(p);
      lists->grads.push_back(p.grad());
    }
    step_lists(fresh, o, /*first_step=*/true);
    step_lists(running, o, /*first_step=*/false);
  }
  return {};
}

}  // namespace pipetrain::optim
