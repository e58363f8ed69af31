#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "pipetrain/expert_parallel/all_to_all.h"
#include "pipetrain/models/moe/moe_config.h"
#include "pipetrain/tensor_parallel/group.h"
#include "pipetrain/tensor_parallel/layers.h"

namespace pipetrain::models {

// Where a router sends each of `tokens` tokens: its `experts_per_token` choices.
struct Routing {
  at::Tensor logits;   // [tokens, experts], the activations' type
  at::Tensor scores;   // [tokens, experts] fp32: softmax or sigmoid of the logits
  at::Tensor chosen;   // [tokens, k] int64: the experts of the k highest scores
  at::Tensor weights;  // [tokens, k] fp32: their scores renormalised to sum to 1
  at::Tensor kept;     // [tokens, k] bool: within the expert's capacity (all when dropless)
};

// A mixture-of-experts SwiGLU feed-forward layer (Mixtral's sparse MoE block, with
// DeepSeek-V3's sigmoid scores and shared experts as options): a router scores the
// experts for every token, the top `experts_per_token` compute it, and their outputs are
// summed with the renormalised scores as weights. Dropless by default: the tokens are
// grouped by expert and each expert multiplies its group at once. In training the layer
// attaches its auxiliary losses (load balancing and z-loss, per sequence, see MoeConfig)
// to its output and records statistics "moe.*" (module/layer_statistics.h). The routed
// experts are replicated over a tensor-parallel group; the shared experts are split over it.
// With an expert-parallel group each rank holds experts / size of the routed experts (the
// same full tensors drawn, its slice kept) and the chosen experts' tokens travel to their
// rank and back (expert_parallel/all_to_all.h).
struct MoeFeedForwardImpl : torch::nn::Module, tensor_parallel::ShardedModule {
  MoeFeedForwardImpl(int64_t d_model, int64_t intermediate_size, const MoeConfig& config,
                     const tensor_parallel::Group& group, double init_std,
                     expert_parallel::Group experts = {});

  // x: [batch, seq, d_model]; returns [batch, seq, d_model].
  at::Tensor forward(const at::Tensor& x);

  // The router's choices for `x` [batch * seq, d_model] of sequences of `seq` tokens.
  Routing route(const at::Tensor& x, int64_t seq) const;
  // The weighted sum of the chosen (kept) experts' outputs for each token, [tokens, d_model].
  at::Tensor experts_output(const at::Tensor& x, const Routing& routing) const;
  // The expert tensors, split over the expert-parallel group along their first dimension.
  std::vector<std::pair<std::string, tensor_parallel::ShardLayout>> shard_layouts() const override;

  MoeConfig config;
  expert_parallel::Group experts_group;
  at::Tensor router;  // [experts, d_model]
  // This rank's experts (all without expert parallelism): E = experts / group size.
  at::Tensor gate_proj;  // [E, intermediate, d_model]
  at::Tensor up_proj;    // [E, intermediate, d_model]
  at::Tensor down_proj;  // [E, d_model, intermediate]
  tensor_parallel::ColumnParallelLinear shared_gate_proj{nullptr}, shared_up_proj{nullptr};
  tensor_parallel::RowParallelLinear shared_down_proj{nullptr};

 private:
  // The grouped rows' outputs, `counts[e]` rows for each of this rank's experts in turn.
  at::Tensor compute_experts(const at::Tensor& rows, const std::vector<int64_t>& counts) const;
  // Rows grouped by (global) expert, `counts` [experts] of them, sent to the ranks holding
  // their experts, computed there and returned in the same order.
  at::Tensor exchange_and_compute(const at::Tensor& grouped, const at::Tensor& counts) const;
};
TORCH_MODULE(MoeFeedForward);

// The load-balancing loss of a routing of sequences of `seq` tokens: per sequence
// E * sum_e f_e * P_e, with f_e the share of the sequence's choices that chose e (before
// any capacity drop) and P_e the mean over its tokens of e's score (sigmoid scores
// normalised to sum 1 per token first); the mean over the sequences. 1 when even.
at::Tensor load_balancing_loss(const Routing& routing, int64_t seq, RouterScore score);

// The router z-loss: the mean over tokens of logsumexp(logits)^2.
at::Tensor router_z_loss(const Routing& routing);

// Each expert's number of choices (before any capacity drop), [experts] fp32.
at::Tensor tokens_per_expert(const Routing& routing, int64_t experts);

}  // namespace pipetrain::models
