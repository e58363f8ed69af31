#include "models/moe/moe.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "autograd/grouped_linear.h"
#include "autograd/linear.h"
#include "module/auxiliary_loss.h"
#include "module/layer_statistics.h"
#include "pipetrain/io/errors.h"
#include "tensor_parallel/initialization.h"

namespace pipetrain::models {
namespace {

using tensor_parallel::init_normal;

at::Tensor normal_parameter(torch::nn::Module& module, const std::string& name,
                            at::IntArrayRef shape, double std) {
  at::Tensor p = at::empty(shape);
  init_normal(p, std);
  return module.register_parameter(name, p);
}

// Every expert's weights drawn, this rank's slice of them kept: the same model for every
// expert-parallel size.
at::Tensor expert_parameter(torch::nn::Module& module, const std::string& name,
                            at::IntArrayRef shape, double std,
                            const expert_parallel::Group& group) {
  at::Tensor all = at::empty(shape);
  init_normal(all, std);
  const int64_t mine = shape[0] / group.size();
  if (group.parallel()) all = all.narrow(0, group.rank() * mine, mine).clone();
  return module.register_parameter(name, all);
}

int64_t total_of(const at::Tensor& counts) {
  return counts.sum().item<int64_t>();
}

std::vector<int64_t> as_vector(const at::Tensor& counts) {
  const at::Tensor c = counts.to(at::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
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
  const at::Tensor hits = at::one_hot(per_sequence, experts);  // [batch, seq * k, experts]
  const at::Tensor place = (hits.cumsum(1) * hits).sum(-1);    // 1-based, in its expert
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
                                       double init_std, expert_parallel::Group experts)
    : config(c), experts_group(std::move(experts)) {
  const int64_t e = c.experts;
  if (e % experts_group.size() != 0) {
    throw io::InputError("model.experts (" + std::to_string(e) +
                         ") must be divisible by expert_parallel (" +
                         std::to_string(experts_group.size()) + ")");
  }
  const auto& g = experts_group;
  router = normal_parameter(*this, "router", {e, d_model}, init_std);
  gate_proj = expert_parameter(*this, "gate_proj", {e, intermediate_size, d_model}, init_std, g);
  up_proj = expert_parameter(*this, "up_proj", {e, intermediate_size, d_model}, init_std, g);
  down_proj = expert_parameter(*this, "down_proj", {e, d_model, intermediate_size}, init_std, g);
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
  r.weights = config.norm_topk_prob ? top / top.sum(-1, /*keepdim=*/true) : top;
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
  const at::Tensor order =
      std::get<1>(expert.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0));
  token = token.index_select(0, order);
  weight = weight.index_select(0, order);
  const at::Tensor grouped = x.index_select(0, token);
  const at::Tensor counts = at::bincount(expert, {}, config.experts).to(at::kCPU, at::kLong);
  const at::Tensor outputs = experts_group.parallel() ? exchange_and_compute(grouped, counts)
                                                      : compute_experts(grouped, as_vector(counts));
  const at::Tensor weighted = (outputs * weight.unsqueeze(1)).to(x.scalar_type());
  return at::zeros_like(x).index_add(0, token, weighted);
}

at::Tensor MoeFeedForwardImpl::compute_experts(const at::Tensor& rows,
                                               const std::vector<int64_t>& counts) const {
  // Every expert, so each has a gradient; their weight gradients deferred together when
  // backward is split (BackwardWeight).
  const at::Tensor hidden = at::silu(autograd::grouped_linear(rows, gate_proj, counts)) *
                            autograd::grouped_linear(rows, up_proj, counts);
  return autograd::grouped_linear(hidden, down_proj, counts);
}

at::Tensor MoeFeedForwardImpl::exchange_and_compute(const at::Tensor& grouped,
                                                    const at::Tensor& counts) const {
  const int size = experts_group.size();
  const int64_t local = gate_proj.size(0);
  // Row r: what this rank sends rank r for each of r's experts; row s of `arriving`: what
  // rank s sends this rank for each of this rank's.
  const at::Tensor sending = counts.view({size, local}).contiguous();
  const at::Tensor arriving = expert_parallel::exchange_counts(sending, experts_group);
  std::vector<int64_t> send_rows, recv_rows;
  for (int r = 0; r < size; ++r) {
    send_rows.push_back(total_of(sending[r]));
    recv_rows.push_back(total_of(arriving[r]));
  }
  const at::Tensor arrived =
      expert_parallel::all_to_all(grouped, send_rows, recv_rows, experts_group);
  // The arrived rows come by sender, each sender's by expert: regrouped by expert.
  const at::Tensor starts =
      (arriving.reshape(-1).cumsum(0) - arriving.reshape(-1)).view({size, local});
  std::vector<at::Tensor> pieces;
  std::vector<int64_t> per_expert(local, 0);
  const auto options = at::TensorOptions(at::kLong);
  for (int64_t e = 0; e < local; ++e) {
    for (int s = 0; s < size; ++s) {
      const int64_t n = arriving[s][e].item<int64_t>(), first = starts[s][e].item<int64_t>();
      pieces.push_back(at::arange(first, first + n, options));
      per_expert[e] += n;
    }
  }
  const at::Tensor order = at::cat(pieces).to(grouped.device());
  const at::Tensor computed = compute_experts(arrived.index_select(0, order), per_expert);
  // Back in the order the rows arrived, then to their senders.
  const at::Tensor back = computed.index_select(0, std::get<1>(order.sort()));
  return expert_parallel::all_to_all(back, recv_rows, send_rows, experts_group);
}

std::vector<std::pair<std::string, tensor_parallel::ShardLayout>>
MoeFeedForwardImpl::shard_layouts() const {
  if (!experts_group.parallel()) return {};
  const tensor_parallel::ShardLayout experts{.group = tensor_parallel::ShardGroup::kExperts};
  return {{"gate_proj", experts}, {"up_proj", experts}, {"down_proj", experts}};
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
