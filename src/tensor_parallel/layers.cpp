#include "pipetrain/tensor_parallel/layers.h"

#include <ATen/ATen.h>

#include "autograd/linear.h"
#include "tensor_parallel/collectives.h"
#include "tensor_parallel/initialization.h"
#include "tensor_parallel/sequence_parallel.h"

namespace pipetrain::tensor_parallel {
namespace {

// This rank's shard of a full N(0, std) weight, registered as a parameter.
at::Tensor sharded_normal(torch::nn::Module& module, const std::string& name,
                          at::IntArrayRef full_shape, double std, ShardLayout layout,
                          const Group& group) {
  const at::Tensor full = at::empty(full_shape);
  init_normal(full, std);
  return module.register_parameter(name, take_shard(full, layout, group.rank(), group.size()));
}

// Vocabulary ids relative to this rank's rows [first, first + rows): the local index
// (0 where the id is elsewhere) and where the id lies outside, as a 0/1 factor of `type`.
struct LocalIds {
  at::Tensor index;
  at::Tensor here;
};
LocalIds local_ids(const at::Tensor& ids, int64_t first, int64_t rows, at::ScalarType type) {
  const at::Tensor local = ids - first;
  const at::Tensor elsewhere = (local < 0) | (local >= rows);
  return {local.masked_fill(elsewhere, 0), elsewhere.logical_not().to(type)};
}

// Each token's cross-entropy (0 where not `counted`), from logits [tokens, vocab / size]
// split over the group.
at::Tensor token_cross_entropy(const at::Tensor& flat, const at::Tensor& targets,
                               const at::Tensor& counted, const Group& group) {
  // A label outside the vocabulary would match no rank's slice and pass unnoticed.
  const int64_t rows = flat.size(-1);
  const int64_t vocab = rows * group.size();
  auto outside = [vocab] {
    return "labels must lie in [0, " + std::to_string(vocab) +
           "), the vocabulary split over the tensor-parallel group, or be " +
           std::to_string(kIgnoreIndex) + " (not counted)";
  };
  const at::Tensor valid = ((targets >= 0) & (targets < vocab)) | counted.logical_not();
  if (targets.is_cuda()) {
    // Checked on the device, so the host does not wait for it inside a step (the data
    // sources check their tokens against the vocabulary on the host first).
    at::_assert_async(valid.all(), outside());
  } else if (targets.numel() > 0 && !valid.all().item<bool>()) {
    throw std::invalid_argument(outside());
  }
  // loss = log(sum over the vocabulary of exp(z - m)) - (z_target - m), with m the
  // per-token maximum: a constant shift, so it carries no gradient.
  at::Tensor maximum = std::get<0>(flat.detach().max(-1)).contiguous();
  group.comm->all_reduce(maximum, comm::ReduceOp::kMax);
  const at::Tensor shifted = flat - maximum.unsqueeze(-1);

  const LocalIds local = local_ids(targets, group.rank() * rows, rows, shifted.scalar_type());
  // Each token's own logit, picked from the flat logits by index_select, whose backward keeps
  // only their shape (gather's would keep every logit until backward: a second
  // [tokens, vocab / size] beside the exponentials).
  const at::Tensor flat_index =
      at::arange(shifted.size(0), local.index.options()) * rows + local.index;
  const at::Tensor picked = shifted.reshape({-1}).index_select(0, flat_index);
  const at::Tensor target_logit = reduce_from_group(picked * local.here, group);
  const at::Tensor sum_exp = reduce_from_group(shifted.exp().sum(-1), group);
  return (sum_exp.log() - target_logit) * counted.to(shifted.scalar_type());
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in_features, int64_t out_features,
                                                   Group group_, LinearOptions options,
                                                   int64_t stride_, bool gather_output_)
    : group(std::move(group_)), stride(stride_), gather_output(gather_output_) {
  weight = sharded_normal(*this, "weight", {out_features, in_features}, options.init_std,
                          {0, stride}, group);
  if (options.bias) bias = register_parameter("bias", at::zeros({weight.size(0)}));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y;
  if (!lora) {
    y = column_parallel_linear(x, weight, bias, group);
  } else {
    // The input gathered once for the frozen weight and the adapter: one reduction of their
    // summed input gradient (the frozen weight needs no gathered input of its own).
    const at::Tensor whole = enter_parallel_region(x, group);
    y = autograd::linear(whole, weight, bias) +
        column_lora(whole, lora_A, lora_B, *lora, is_training(), group);
  }
  return gather_output ? gather_from_group(y, group) : y;
}

std::vector<std::pair<std::string, ShardLayout>> ColumnParallelLinearImpl::shard_layouts() const {
  std::vector<std::pair<std::string, ShardLayout>> layouts{{"weight", {0, stride}}};
  if (bias.defined()) layouts.emplace_back("bias", ShardLayout{0, stride});
  if (lora) layouts.emplace_back("lora_B", ShardLayout{0, stride});
  return layouts;
}

void ColumnParallelLinearImpl::add_lora(const LoraOptions& options) {
  lora = options;
  lora_A = register_parameter("lora_A", initial_lora_a(options.rank, weight.size(1)));
  lora_B = register_parameter("lora_B", at::zeros({weight.size(0), options.rank}));
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in_features, int64_t out_features,
                                             Group group_, LinearOptions options)
    : group(std::move(group_)) {
  weight =
      sharded_normal(*this, "weight", {out_features, in_features}, options.init_std, {1, 1}, group);
  if (options.bias) bias = register_parameter("bias", at::zeros({out_features}));
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  // Alone, the bias joins the product (one addmm, as torch::nn::Linear).
  if (!group.parallel()) {
    const at::Tensor y = autograd::linear(x, weight, bias);
    return lora ? y + row_lora(x, lora_A, lora_B, *lora, is_training(), group) : y;
  }
  at::Tensor partial = autograd::linear(x, weight);
  if (lora) partial = partial + row_lora(x, lora_A, lora_B, *lora, is_training(), group);
  const at::Tensor y = leave_parallel_region(partial, group);
  return bias.defined() ? y + sequence_shared(bias, group) : y;
}

std::vector<std::pair<std::string, ShardLayout>> RowParallelLinearImpl::shard_layouts() const {
  std::vector<std::pair<std::string, ShardLayout>> layouts{{"weight", {1, 1}}};
  if (lora) layouts.emplace_back("lora_A", ShardLayout{1, 1});
  return layouts;
}

void RowParallelLinearImpl::add_lora(const LoraOptions& options) {
  lora = options;
  const at::Tensor a = initial_lora_a(options.rank, weight.size(1) * group.size());
  lora_A = register_parameter("lora_A", take_shard(a, {1, 1}, group.rank(), group.size()));
  lora_B = register_parameter("lora_B", at::zeros({weight.size(0), options.rank}));
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t dim,
                                                       Group group_, double init_std)
    : group(std::move(group_)) {
  weight = sharded_normal(*this, "weight", {vocab_size, dim}, init_std, {0, 1}, group);
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (!group.parallel()) return at::embedding(weight, ids);
  const LocalIds local = local_ids(ids, first_row(), weight.size(0), weight.scalar_type());
  return leave_parallel_region(at::embedding(weight, local.index) * local.here.unsqueeze(-1),
                               group);
}

std::vector<std::pair<std::string, ShardLayout>> VocabParallelEmbeddingImpl::shard_layouts() const {
  return {{"weight", {0, 1}}};
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                        const Group& group, TokenReduction reduction) {
  const at::Tensor flat = logits.reshape({-1, logits.size(-1)});
  const at::Tensor targets = labels.reshape({-1});
  if (!group.parallel()) {  // PyTorch's own: the operators eager issues
    const auto torch_reduction = reduction == TokenReduction::kSum    ? at::Reduction::Sum
                                 : reduction == TokenReduction::kMean ? at::Reduction::Mean
                                                                      : at::Reduction::None;
    const at::Tensor loss =
        at::cross_entropy_loss(flat, targets, {}, torch_reduction, kIgnoreIndex);
    return reduction == TokenReduction::kNone ? loss.reshape(labels.sizes()) : loss;
  }
  const at::Tensor counted = targets != kIgnoreIndex;
  const at::Tensor tokens = token_cross_entropy(flat, targets, counted, group);
  if (reduction == TokenReduction::kNone) return tokens.reshape(labels.sizes());
  const at::Tensor sum = tokens.sum();
  if (reduction == TokenReduction::kSum) return sum;
  return sum / counted.sum().to(sum.scalar_type());  // as PyTorch's mean: NaN over none
}

}  // namespace pipetrain::tensor_parallel
