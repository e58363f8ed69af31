#include "pipetrain/tensor_parallel/layers.h"

#include <ATen/ATen.h>

#include "pipetrain/tensor_parallel/collectives.h"

namespace pipetrain::tensor_parallel {
namespace {

// This rank's shard of a full N(0, std) weight, registered as a parameter.
at::Tensor sharded_normal(torch::nn::Module& module, const std::string& name,
                          at::IntArrayRef full_shape, double std, ShardLayout layout,
                          const Group& group) {
  const at::Tensor full = at::empty(full_shape).normal_(0.0, std);
  return module.register_parameter(name, take_shard(full, layout, group.rank(), group.size()));
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in_features, int64_t out_features,
                                                   Group group_, LinearOptions options,
                                                   int64_t stride_, bool gather_output_)
    : group(std::move(group_)), stride(stride_), gather_output(gather_output_) {
  weight = sharded_normal(*this, "weight", {out_features, in_features}, options.init_std,
                          {0, stride}, group);
  if (options.bias) {
    bias = register_parameter(
        "bias", take_shard(at::zeros({out_features}), {0, stride}, group.rank(), group.size()));
  }
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor y = at::linear(copy_to_group(x, group), weight, bias);
  return gather_output ? gather_from_group(y, group) : y;
}

std::vector<std::pair<std::string, ShardLayout>> ColumnParallelLinearImpl::shard_layouts() const {
  std::vector<std::pair<std::string, ShardLayout>> layouts{{"weight", {0, stride}}};
  if (bias.defined()) layouts.emplace_back("bias", ShardLayout{0, stride});
  return layouts;
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in_features, int64_t out_features,
                                             Group group_, LinearOptions options)
    : group(std::move(group_)) {
  weight =
      sharded_normal(*this, "weight", {out_features, in_features}, options.init_std, {1, 1}, group);
  if (options.bias) bias = register_parameter("bias", at::zeros({out_features}));
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor y = reduce_from_group(at::linear(x, weight), group);
  return bias.defined() ? y + bias : y;
}

std::vector<std::pair<std::string, ShardLayout>> RowParallelLinearImpl::shard_layouts() const {
  return {{"weight", {1, 1}}};
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t dim,
                                                       Group group_, double init_std)
    : group(std::move(group_)) {
  weight = sharded_normal(*this, "weight", {vocab_size, dim}, init_std, {0, 1}, group);
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (!group.parallel()) return at::embedding(weight, ids);
  const int64_t rows = weight.size(0);
  const at::Tensor local = ids - first_row();
  const at::Tensor elsewhere = (local < 0) | (local >= rows);
  const at::Tensor found = at::embedding(weight, local.masked_fill(elsewhere, 0));
  return reduce_from_group(found * elsewhere.logical_not().unsqueeze(-1).to(found.scalar_type()),
                           group);
}

std::vector<std::pair<std::string, ShardLayout>> VocabParallelEmbeddingImpl::shard_layouts() const {
  return {{"weight", {0, 1}}};
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                        const Group& group) {
  const at::Tensor flat = logits.reshape({-1, logits.size(-1)});
  const at::Tensor targets = labels.reshape({-1});
  if (!group.parallel()) return at::cross_entropy_loss(flat, targets);
  // loss = log(sum over the vocabulary of exp(z - m)) - (z_target - m), with m the
  // per-token maximum: a constant shift, so it carries no gradient.
  at::Tensor maximum = std::get<0>(flat.detach().max(-1)).contiguous();
  group.comm->all_reduce(maximum, comm::ReduceOp::kMax);
  const at::Tensor shifted = flat - maximum.unsqueeze(-1);

  const int64_t rows = flat.size(-1);
  const at::Tensor local = targets - group.rank() * rows;
  const at::Tensor elsewhere = (local < 0) | (local >= rows);
  const at::Tensor picked =
      shifted.gather(-1, local.masked_fill(elsewhere, 0).unsqueeze(-1)).squeeze(-1);
  const at::Tensor target_logit =
      reduce_from_group(picked * elsewhere.logical_not().to(picked.scalar_type()), group);
  const at::Tensor sum_exp = reduce_from_group(shifted.exp().sum(-1), group);
  return (sum_exp.log() - target_logit).mean();
}

}  // namespace pipetrain::tensor_parallel
