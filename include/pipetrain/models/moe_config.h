#pragma once

#include <cstdint>

namespace pipetrain::models {

// How a router scores the experts for a token: Mixtral's softmax over the experts, or
// DeepSeek-V3's independent sigmoid per expert. Either way the chosen experts' scores are
// renormalised to sum to 1 and weight their outputs.
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
};

}  // namespace pipetrain::models
