#include "tensor_parallel/collectives.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "saved_group.h"

namespace pipetrain::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using detail::save_group;
using detail::saved_group;

at::Tensor all_reduce_sum(const at::Tensor& x, const Group& group) {
  at::Tensor sum = x.detach().clone(at::MemoryFormat::Contiguous);
  group.comm->all_reduce(sum, comm::ReduceOp::kSum);
  return sum;
}

// [size, ..., n] stacked shards -> [..., size * n].
at::Tensor all_gather_last_dim(const at::Tensor& x, const Group& group) {
  const at::Tensor stacked = group.comm->all_gather(x.detach().contiguous());
  return at::cat(stacked.unbind(0), -1);
}

at::Tensor own_part_of_last_dim(const at::Tensor& x, const Group& group) {
  return x.chunk(group.size(), -1).at(group.rank()).contiguous();
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group& group) {
    save_group(ctx, group);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduce_sum(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, const Group& group) {
    return all_reduce_sum(x, group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct GatherFromGroup : torch::autograd::Function<GatherFromGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group& group) {
    save_group(ctx, group);
    return all_gather_last_dim(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_part_of_last_dim(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_group(const at::Tensor& x, const Group& group) {
  return group.parallel() ? CopyToGroup::apply(x, group) : x;
}

at::Tensor reduce_from_group(const at::Tensor& x, const Group& group) {
  return group.parallel() ? ReduceFromGroup::apply(x, group) : x;
}

at::Tensor gather_from_group(const at::Tensor& x, const Group& group) {
  return group.parallel() ? GatherFromGroup::apply(x, group) : x;
}

}  // namespace pipetrain::tensor_parallel
