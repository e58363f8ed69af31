#include "optim/fused_sgd.h"

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
    // A buffer made now starts as the (decayed) gradient, LibTorch's first step, which the
    // kernel does when told it is the first step: new and running buffers go in separate
    // launches, and the new ones join the state once theirs has run.
    SgdLists fresh, running;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto slot = state().find(p.unsafeGetTensorImpl());
      const bool made = o.momentum() == 0 || slot != state().end();
      SgdLists& lists = made ? running : fresh;
      lists.params.push_back(p);
      lists.grads.push_back(p.grad());
      if (o.momentum() == 0) continue;
      lists.momentum_buffers.push_back(
          made ? static_cast<torch::optim::SGDParamState&>(*slot->second).momentum_buffer()
               : at::empty_like(p, at::MemoryFormat::Preserve));
    }
    step_lists(fresh, o, /*first_step=*/true);
    step_lists(running, o, /*first_step=*/false);
    for (std::size_t i = 0; i < fresh.params.size(); ++i) {
      auto made = std::make_unique<torch::optim::SGDParamState>();
      made->momentum_buffer(fresh.momentum_buffers[i]);
      state()[fresh.params[i].unsafeGetTensorImpl()] = std::move(made);
    }
  }
  return {};
}

}  // namespace pipetrain::optim
