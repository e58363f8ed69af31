#pragma once
// Carries a tensor-parallel group from an autograd function's forward to its backward.

#include <torch/autograd.h>

#include <utility>

#include "pipetrain/tensor_parallel/group.h"

namespace pipetrain::tensor_parallel::detail {

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(Group g) : group(std::move(g)) {}
  Group group;
};

inline void save_group(torch::autograd::AutogradContext* ctx, const Group& group) {
  ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
}

inline const Group& saved_group(torch::autograd::AutogradContext* ctx) {
  return static_cast<GroupHolder&>(*ctx->saved_data["group"].toCapsule()).group;
}

}  // namespace pipetrain::tensor_parallel::detail
