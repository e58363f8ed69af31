#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "pipetrain/tensor_parallel/group.h"
#include "pipetrain/tensor_parallel/lora.h"
#include "pipetrain/tensor_parallel/shard.h"
#include "pipetrain/tensor_parallel/token_reduction.h"

// Megatron-LM's tensor-parallel layers. Each draws its full weight from the default
// generator and keeps its rank's shard, so the same seed gives the same full model for
// every group size. With a group of one they are the plain layers.
namespace pipetrain::tensor_parallel {

struct LinearOptions {
  bool bias = true;
  double init_std = 0.02;  // weights ~ N(0, init_std), biases zero
};

// y = x W^T + b with W split by output features (rows): each rank computes its slice of
// y. `stride` > 1 splits each of `stride` row blocks separately (fused q/k/v).
struct ColumnParallelLinearImpl : torch::nn::Module, ShardedModule {
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, Group group,
                           LinearOptions options = {}, int64_t stride = 1,
                           bool gather_output = false);
  // x: replicated [..., in] (under sequence parallelism this rank's slice [b, seq / size,
  // in], gathered first); returns [..., out / size], or [..., out] when gathering.
  at::Tensor forward(const at::Tensor& x);
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;
  // Adds a LoRA adapter (lora_A whole, lora_B split like the weight); see lora.h.
  void add_lora(const LoraOptions& options);

  Group group;
  int64_t stride;
  bool gather_output;
  at::Tensor weight;  // [out / size, in]
  at::Tensor bias;    // [out / size], or undefined
  std::optional<LoraOptions> lora;
  at::Tensor lora_A;  // [rank, in], or undefined
  at::Tensor lora_B;  // [out / size, rank], or undefined
};
TORCH_MODULE(ColumnParallelLinear);

// y = x W^T + b with W split by input features (columns): each rank multiplies its slice
// of x and the partial products are summed over the group; b is replicated.
struct RowParallelLinearImpl : torch::nn::Module, ShardedModule {
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, Group group,
                        LinearOptions options = {});
  // x: this rank's slice [..., in / size]; returns the replicated [..., out] (under
  // sequence parallelism this rank's slice of the sequence of it, [b, seq / size, out]).
  at::Tensor forward(const at::Tensor& x);
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;
  // Adds a LoRA adapter (lora_A split like the weight, lora_B whole); see lora.h.
  void add_lora(const LoraOptions& options);

  Group group;
  at::Tensor weight;  // [out, in / size]
  at::Tensor bias;    // [out], or undefined
  std::optional<LoraOptions> lora;
  at::Tensor lora_A;  // [rank, in / size], or undefined
  at::Tensor lora_B;  // [out, rank], or undefined
};
TORCH_MODULE(RowParallelLinear);

// An embedding table split by vocabulary rows: each rank looks up the ids in its range,
// zeros for the rest, and the group sums the results.
struct VocabParallelEmbeddingImpl : torch::nn::Module, ShardedModule {
  VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t dim, Group group, double init_std = 0.02);
  // ids: any shape of int64; returns the replicated [..., dim] (under sequence parallelism
  // ids [b, seq] give this rank's slice [b, seq / size, dim]).
  at::Tensor forward(const at::Tensor& ids);
  std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const override;
  // This rank's vocabulary rows are [first_row, first_row + weight.size(0)).
  int64_t first_row() const { return group.rank() * weight.size(0); }

  Group group;
  at::Tensor weight;  // [vocab / size, dim]
};
TORCH_MODULE(VocabParallelEmbedding);

// Cross-entropy of logits split by vocabulary ([..., vocab / size], this rank's rows
// starting at rank * vocab / size) against labels [...], over the labels that are not
// kIgnoreIndex (a mean over none is NaN, as PyTorch's): the group exchanges only per-token
// maxima, sums of exponentials and target logits, never the full logits. Every rank
// returns the same loss; its backward yields each rank's slice of the gradient.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& labels,
                                        const Group& group,
                                        TokenReduction reduction = TokenReduction::kMean);

}  // namespace pipetrain::tensor_parallel
