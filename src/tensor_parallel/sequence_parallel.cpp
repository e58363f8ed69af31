#include "tensor_parallel/sequence_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "autograd/linear.h"
#include "context_parallel/whole_sequences.h"
#include "saved_group.h"
#include "tensor_parallel/collectives.h"

namespace pipetrain::tensor_parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using detail::save_group;
using detail::saved_group;

void require_sequence_dim(const at::Tensor& x) {
  if (x.dim() < 2)
    throw std::invalid_argument("sequence parallelism splits [batch, seq, ...] activations");
}

// Positions per rank of a sequence of `whole` split over `size` ranks.
int64_t slice_length(int64_t whole, int64_t size) {
  if (whole % size != 0) {
    throw std::invalid_argument("sequence parallelism: a sequence of " + std::to_string(whole) +
                                " positions does not split over " + std::to_string(size) +
                                " ranks");
  }
  return whole / size;
}

// [b, size * s, ...] -> this rank's [b, s, ...] of the group's element-wise sum.
at::Tensor reduce_scatter_sequence(const at::Tensor& x, const Group& group) {
  require_sequence_dim(x);
  const int64_t size = group.size(), length = slice_length(x.size(1), size);
  std::vector<int64_t> split = x.sizes().vec();
  split[1] = length;
  split.insert(split.begin() + 1, size);  // [b, size, s, ...]
  std::vector<int64_t> order(split.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::swap(order[0], order[1]);  // [size, b, s, ...]: rank r's block r
  const at::Tensor blocks = x.detach().reshape(split).permute(order).contiguous().view({-1});
  std::vector<int64_t> local = x.sizes().vec();
  local[1] = length;
  return group.comm->reduce_scatter(blocks, comm::ReduceOp::kSum).view(local);
}

// Every rank's [b, s, ...] -> [b, size * s, ...] in rank order.
at::Tensor all_gather_sequence(const at::Tensor& x, const Group& group) {
  require_sequence_dim(x);
  const at::Tensor stacked = group.comm->all_gather(x.detach().contiguous());
  return at::cat(stacked.unbind(0), 1);
}

using GroupOp = at::Tensor (*)(const at::Tensor&, const Group&);

// An autograd function: `Forward` over the group, `Backward` (its adjoint) on the gradient.
template <GroupOp Forward, GroupOp Backward>
struct AcrossGroup : torch::autograd::Function<AcrossGroup<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const Group& group) {
    save_group(ctx, group);
    return Forward(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Backward(grads[0], saved_group(ctx)), at::Tensor()};
  }
};

using GatherSequence = AcrossGroup<all_gather_sequence, reduce_scatter_sequence>;
using ReduceScatterSequence = AcrossGroup<reduce_scatter_sequence, all_gather_sequence>;

}  // namespace

bool splits_sequence(const Group& group) {
  return group.sequence_parallel && group.parallel() && !context_parallel::whole_sequences();
}

at::Tensor enter_parallel_region(const at::Tensor& x, const Group& group) {
  return splits_sequence(group) ? GatherSequence::apply(x, group) : copy_to_group(x, group);
}

at::Tensor column_parallel_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const Group& group) {
  if (!splits_sequence(group)) return autograd::linear(copy_to_group(x, group), weight, bias);
  return autograd::linear(
      x, weight, bias,
      autograd::SlicedInput{
          [group](const at::Tensor& slice) { return all_gather_sequence(slice, group); },
          [group](const at::Tensor& whole) { return reduce_scatter_sequence(whole, group); }});
}

at::Tensor leave_parallel_region(const at::Tensor& x, const Group& group) {
  return splits_sequence(group) ? ReduceScatterSequence::apply(x, group)
                                : reduce_from_group(x, group);
}

at::Tensor sequence_shared(const at::Tensor& parameter, const Group& group) {
  return splits_sequence(group) ? copy_to_group(parameter, group) : parameter;
}

at::Tensor sequence_dropout(const at::Tensor& x, double p, bool training, const Group& group,
                            const context_parallel::Group& context) {
  // No call at all where nothing is dropped (at::dropout would return x, but costs a call).
  if (!training || p == 0 || x.numel() == 0) return x;
  const bool shared = splits_sequence(group), cut = context_parallel::splits(context);
  if (!shared && !cut) return at::dropout(x, p, training);
  require_sequence_dim(x);
  // As at::dropout draws on the CPU for the whole: a mask of the input's type, scaled.
  std::vector<int64_t> whole = x.sizes().vec();
  whole[1] *= (shared ? group.size() : 1) * (cut ? context.size() : 1);
  at::Tensor noise = at::empty(whole, x.options()).bernoulli_(1 - p);
  noise.div_(1 - p);
  noise = context_parallel::take_local(noise, 1, context);  // a copy where it cuts
  if (!shared) return x * noise;
  // A copy of the slice: a view would keep the whole mask alive until backward.
  return x * noise.narrow(1, group.rank() * x.size(1), x.size(1)).clone();
}

SequenceSlice local_sequence(int64_t whole, const Group& group) {
  if (!splits_sequence(group)) return {0, whole};
  const int64_t length = slice_length(whole, group.size());
  return {group.rank() * length, length};
}

}  // namespace pipetrain::tensor_parallel
