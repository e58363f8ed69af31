#pragma once

#include <cstdint>
#include <vector>

namespace pipetrain::models {

// How a router scores the experts for a token: Mixtral's softmax over the experts, or
// DeepSeek-V3's independent sigmoid per expert. The chosen experts' scores weight their
// outputs, renormalised to sum to 1 unless `norm_topk_prob` is false (Qwen3-MoE's option).
enum class RouterScore { kSoftmax, kSigmoid };

// A mixture-of-experts feed-forward layer's sizes and router (see moe.h), named as in
// transformers' MixtralConfig where it has the name. Every load-balancing statistic and
// every capacity is taken per sequence, so splitting a batch into micro-batches or over
// data-parallel ranks changes nothing.
struct MoeConfig {
  int64_t experts = 8;            // num_local_experts
  int64_t experts_per_token = 2;  // num_experts_per_tok: the router's top k
  RouterScore score = RouterScore::kSoftmax;
  // DeepSeek-V3's shared experts: a SwiGLU MLP `shared_experts` experts wide that every
  // token passes through at weight 1, beside the routed ones. 0: none (Mixtral).
  int64_t shared_experts = 0;
  // Coefficient of the Switch/GShard load-balancing loss E * sum_e f_e * P_e (f_e: the
  // share of a sequence's expert choices that chose e; P_e: e's mean score), which is 1
  // when the experts are used evenly.
  double router_aux_loss_coef = 0.01;
  // Coefficient of the router z-loss: the mean square of the logsumexp of the router's
  // logits (ST-MoE).
  double router_z_loss_coef = 0.0;
  // 0: dropless, every choice is computed. Else each expert takes at most
  // ceil(capacity_factor * seq * experts_per_token / experts) of a sequence's tokens, in
  // sequence order, and the choices beyond it are dropped (counted).
  double capacity_factor = 0.0;
  // The chosen experts' scores renormalised to sum to 1 (transformers' norm_topk_prob).
  bool norm_topk_prob = true;
  // Each expert's MLP width; 0: the decoder's intermediate_size (Mixtral). Qwen3-MoE's
  // moe_intermediate_size.
  int64_t moe_intermediate_size = 0;
  // Which decoder blocks route (Qwen3-MoE): block i (0-based) does where (i + 1) is a
  // multiple of decoder_sparse_step and i is not in mlp_only_layers; the
  // others have a dense MLP of intermediate_size. 1 and none: every block (Mixtral).
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers{};
  bool routes(int64_t layer) const {
    if (decoder_sparse_step < 1 || (layer + 1) % decoder_sparse_step != 0) return false;
    for (const int64_t dense : mlp_only_layers) {
      if (dense == layer) return false;
    }
    return true;
  }
};

}  // namespace pipetrain::models
