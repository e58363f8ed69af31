#include "pipetrain/models/moe.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "pipetrain/autograd/linear.h"
#include "pipetrain/module/auxiliary_loss.h"
#include "pipetrain/module/layer_statistics.h"
#include "pipetrain/tensor_parallel/initialization.h"

namespace pipetrain::models {
namespace {

using tensor_parallel::init_normal;

at::Tensor normal_parameter(torch::nn::Module& module, const std::string& name,
                            at::IntArrayRef shape, double std) {
  at::Tensor p = at::empty(shape);
  init_normal(p, std);
  return module.register_parameter(name, p);
}

// The most tokens of a sequence of `seq` one expert takes.
int64_t capacity(const MoeConfig& c, int64_t seq) {
  return static_cast<int64_t>(
      std::ceil(c.capacity_factor * static_cast<double>(seq * c.experts_per_token) /
                static_cast<double>(c.experts)));
}

// Which choices fit their expert's capacity: within each sequence, in sequence order (a
// token's choices in rank order), the first `limit` choices of each expert.
at::Tensor within_capacity(const at::Tensor& chosen, int64_t seq, int64_t experts, int64_t limit) {
  const int64_t k = chosen.size(1);
  const at::Tensor per_sequence = chosen.reshape({-1, seq * k});
  const at::Tensor hits = at::one_hot(per_sequence, experts);   // [batch, seq * k, experts]
  const at::Tensor place = (hits.cumsum(1) * hits).sum(-1);     // 1-based, in its expert
  return (place <= limit).reshape({-1, k});
}

// The share of each expert in each sequence's choices, [batch, experts].
at::Tensor choice_shares(const Routing& r, int64_t seq, int64_t experts) {
  const int64_t k = r.chosen.size(1);
  const at::Tensor hits = at::one_hot(r.chosen.reshape({-1, seq * k}), experts);
  return hits.sum(1).to(at::kFloat) / static_cast<double>(seq * k);
}

}  // namespace

MoeFeedForwardImpl::MoeFeedForwardImpl(int64_t d_model, int64_t intermediate_size,
                                       const MoeConfig& c, const tensor_parallel::Group& group,
                                       double init_std)
    : config(c) {
  const int64_t e = c.experts;
  router = normal_parameter(*this, "router", {e, d_model}, init_std);
  gate_proj = normal_parameter(*this, "gate_proj", {e, intermediate_size, d_model}, init_std);
  up_proj = normal_parameter(*this, "up_proj", {e, intermediate_size, d_model}, init_std);
  down_proj = normal_parameter(*this, "down_proj", {e, d_model, intermediate_size}, init_std);
  if (c.shared_experts == 0) return;
  const tensor_parallel::LinearOptions linear{.bias = false, .init_std = init_std};
  const int64_t width = c.shared_experts * intermediate_size;
  shared_gate_proj = register_module(
      "shared_gate_proj", tensor_parallel::ColumnParallelLinear(d_model, width, group, linear));
  shared_up_proj = register_module(
      "shared_up_proj", tensor_parallel::ColumnParallelLinear(d_model, width, group, linear));
  shared_down_proj = register_module(
      "shared_down_proj", tensor_parallel::RowParallelLinear(width, d_model, group, linear));
}

Routing MoeFeedForwardImpl::route(const at::Tensor& x, int64_t seq) const {
  Routing r;
  r.logits = autograd::linear(x, router);
  const at::Tensor wide = r.logits.to(at::kFloat);
  r.scores = config.score == RouterScore::kSoftmax ? at::softmax(wide, -1) : at::sigmoid(wide);
  auto [top, chosen] = r.scores.topk(config.experts_per_token, -1);
  r.chosen = chosen;
  r.weights = top / top.sum(-1, /*keepdim=*/true);
  r.kept = config.capacity_factor > 0
               ? within_capacity(chosen, seq, config.experts, capacity(config, seq))
               : at::ones_like(chosen, at::kBool);
  return r;
}

at::Tensor MoeFeedForwardImpl::experts_output(const at::Tensor& x, const Routing& r) const {
  const int64_t k = r.chosen.size(1);
  at::Tensor expert = r.chosen.reshape(-1);
  at::Tensor token = at::arange(x.size(0), r.chosen.options()).repeat_interleave(k);
  at::Tensor weight = r.weights.reshape(-1);
  if (config.capacity_factor > 0) {
    const at::Tensor kept = r.kept.reshape(-1).nonzero().squeeze(1);
    expert = expert.index_select(0, kept);
    token = token.index_select(0, kept);
    weight = weight.index_select(0, kept);
  }
  // The choices grouped by expert, in token order within a group.
  const at::Tensor order = std::get<1>(expert.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0));
  token = token.index_select(0, order);
  weight = weight.index_select(0, order);
  const at::Tensor grouped = x.index_select(0, token);
  const at::Tensor counts = at::bincount(expert, {}, config.experts).to(at::kCPU, at::kLong);
  const int64_t* count = counts.data_ptr<int64_t>();
  std::vector<at::Tensor> outputs;
  int64_t first = 0;
  for (int64_t e = 0; e < config.experts; ++e) {  // every expert, so each has a gradient
    const int64_t n = count[e];
    const at::Tensor mine = grouped.narrow(0, first, n);
    const at::Tensor hidden =
        at::silu(at::linear(mine, gate_proj[e])) * at::linear(mine, up_proj[e]);
    outputs.push_back(at::linear(hidden, down_proj[e]));
    first += n;
  }
  const at::Tensor weighted = (at::cat(outputs) * weight.unsqueeze(1)).to(x.scalar_type());
  return at::zeros_like(x).index_add(0, token, weighted);
}

at::Tensor MoeFeedForwardImpl::forward(const at::Tensor& x) {
  if (x.dim() != 3) throw std::invalid_argument("an MoE layer takes [batch, seq, d_model]");
  const int64_t seq = x.size(1);
  const at::Tensor flat = x.reshape({-1, x.size(2)});
  const Routing r = route(flat, seq);
  at::Tensor out = experts_output(flat, r);
  if (config.shared_experts > 0)
    out = out + shared_down_proj(at::silu(shared_gate_proj(flat)) * shared_up_proj(flat));
  out = out.view(x.sizes());
  if (!is_training()) return out;
  const at::Tensor balance = load_balancing_loss(r, seq, config.score);
  const at::Tensor z = router_z_loss(r);
  const at::Tensor counts = tokens_per_expert(r, config.experts);
  module::record_statistic("moe.passes", at::ones({}));
  module::record_statistic("moe.load_balancing_loss", balance);
  module::record_statistic("moe.z_loss", z);
  module::record_statistic("moe.tokens_per_expert", counts);
  module::record_statistic("moe.max_load", counts.max() / counts.mean());
  module::record_statistic("moe.dropped_tokens", (~r.kept).sum());
  at::Tensor aux = at::zeros({}, balance.options());
  if (config.router_aux_loss_coef != 0) aux = aux + config.router_aux_loss_coef * balance;
  if (config.router_z_loss_coef != 0) aux = aux + config.router_z_loss_coef * z;
  return module::with_auxiliary_loss(out, aux);
}

at::Tensor load_balancing_loss(const Routing& r, int64_t seq, RouterScore score) {
  const int64_t experts = r.scores.size(1);
  at::Tensor probabilities = r.scores;
  if (score == RouterScore::kSigmoid) probabilities = r.scores / r.scores.sum(-1, true);
  const at::Tensor mean_score = probabilities.reshape({-1, seq, experts}).mean(1);
  const at::Tensor shares = choice_shares(r, seq, experts);
  return (static_cast<double>(experts) * (shares * mean_score).sum(-1)).mean();
}

at::Tensor router_z_loss(const Routing& r) {
  return r.logits.to(at::kFloat).logsumexp(-1).pow(2).mean();
}

at::Tensor tokens_per_expert(const Routing& r, int64_t experts) {
  return at::bincount(r.chosen.reshape(-1), {}, experts).to(at::kFloat);
}

}  // namespace pipetrain::models
