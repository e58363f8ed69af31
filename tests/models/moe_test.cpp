// The MoE layer against a loop over tokens one by one (outputs, router and expert
// gradients), its auxiliary losses against their formulas, and the auxiliary loss's way
// into the gradients under a scale and activation checkpointing.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <map>
#include <vector>

#include "models/moe/moe.h"
#include "module/activation_checkpoint.h"
#include "module/auxiliary_loss.h"
#include "module/layer_statistics.h"

namespace pipetrain::models {
namespace {

constexpr int64_t kDim = 6, kWidth = 5, kBatch = 3, kSeq = 7;

MoeFeedForward make_layer(const MoeConfig& config) {
  at::manual_seed(3);
  MoeFeedForward layer(kDim, kWidth, config, tensor_parallel::Group{}, /*init_std=*/0.5);
  return layer;
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up,
                  const at::Tensor& down) {
  return at::matmul(down, at::silu(at::matmul(gate, x)) * at::matmul(up, x));
}

// The layer's output computed a token at a time, in plain tensor arithmetic.
at::Tensor token_by_token(MoeFeedForwardImpl& m, const at::Tensor& x) {
  const MoeConfig& c = m.config;
  const int64_t limit = static_cast<int64_t>(
      std::ceil(c.capacity_factor * static_cast<double>(x.size(1) * c.experts_per_token) /
                static_cast<double>(c.experts)));
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b) {
    std::vector<int64_t> taken(c.experts, 0);
    for (int64_t t = 0; t < x.size(1); ++t) {
      const at::Tensor token = x[b][t];
      const at::Tensor logits = at::matmul(m.router, token);
      const at::Tensor scores =
          c.score == RouterScore::kSoftmax ? at::softmax(logits, 0) : at::sigmoid(logits);
      auto [top, chosen] = scores.topk(c.experts_per_token);
      const at::Tensor weights = top / top.sum();
      at::Tensor out = at::zeros({kDim});
      for (int64_t j = 0; j < c.experts_per_token; ++j) {
        const int64_t e = chosen[j].item<int64_t>();
        if (c.capacity_factor > 0 && ++taken[e] > limit) continue;
        out = out + weights[j] * swiglu(token, m.gate_proj[e], m.up_proj[e], m.down_proj[e]);
      }
      if (c.shared_experts > 0) {
        out = out + swiglu(token, m.shared_gate_proj->weight, m.shared_up_proj->weight,
                           m.shared_down_proj->weight);
      }
      rows.push_back(out);
    }
  }
  return at::stack(rows).view(x.sizes());
}

std::map<std::string, at::Tensor> gradients(MoeFeedForwardImpl& m) {
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : m.named_parameters()) {
    const at::Tensor& grad = p.value().grad();
    grads[p.key()] = grad.defined() ? grad.clone() : at::Tensor();
    p.value().mutable_grad() = at::Tensor();
  }
  return grads;
}

std::vector<MoeConfig> cases() {
  MoeConfig softmax{.experts = 4, .experts_per_token = 2};
  MoeConfig sigmoid_shared{.experts = 5, .experts_per_token = 3};
  sigmoid_shared.score = RouterScore::kSigmoid;
  sigmoid_shared.shared_experts = 2;
  MoeConfig capacity{.experts = 4, .experts_per_token = 2};
  capacity.capacity_factor = 0.6;  // ceil(0.6 * 7 * 2 / 4) = 3 of 7 tokens' choices
  MoeConfig top1{.experts = 3, .experts_per_token = 1};
  return {softmax, sigmoid_shared, capacity, top1};
}

TEST(MoeFeedForward, EqualsATokenByTokenLoopInOutputsAndGradients) {
  for (const MoeConfig& config : cases()) {
    SCOPED_TRACE("experts " + std::to_string(config.experts) + " top " +
                 std::to_string(config.experts_per_token) + " capacity " +
                 std::to_string(config.capacity_factor));
    MoeFeedForward layer = make_layer(config);
    layer->eval();  // no auxiliary loss: the outputs alone
    const at::Tensor x = at::randn({kBatch, kSeq, kDim});
    const at::Tensor target = at::randn({kBatch, kSeq, kDim});
    const at::Tensor out = layer(x);
    (out * target).sum().backward();
    const auto grads = gradients(*layer);
    const at::Tensor expected = token_by_token(*layer, x);
    (expected * target).sum().backward();
    const auto expected_grads = gradients(*layer);
    EXPECT_TRUE(at::allclose(out, expected, 1e-5, 1e-5)) << (out - expected).abs().max();
    for (const auto& [name, grad] : expected_grads) {
      EXPECT_TRUE(at::allclose(grads.at(name), grad, 1e-5, 1e-5))
          << name << " differs by " << (grads.at(name) - grad).abs().max();
    }
    if (config.capacity_factor > 0) {
      const Routing r = layer->route(x.reshape({-1, kDim}), kSeq);
      EXPECT_GT((~r.kept).sum().item<int64_t>(), 0) << "the case drops nothing";
    }
  }
}

TEST(MoeFeedForward, AuxiliaryLossesFollowTheirFormulas) {
  for (const MoeConfig& config : cases()) {
    MoeFeedForward layer = make_layer(config);
    const at::Tensor x = at::randn({kBatch * kSeq, kDim});
    const Routing r = layer->route(x, kSeq);
    // E * sum_e f_e P_e per sequence, by counting.
    double balance = 0, z = 0;
    const int64_t e_count = config.experts, k = config.experts_per_token;
    for (int64_t b = 0; b < kBatch; ++b) {
      std::vector<double> chose(e_count, 0), score(e_count, 0);
      for (int64_t t = 0; t < kSeq; ++t) {
        const int64_t row = b * kSeq + t;
        const at::Tensor s = r.scores[row];
        const double total = s.sum().item<double>();
        for (int64_t e = 0; e < e_count; ++e) {
          const double v = s[e].item<double>();
          score[e] += (config.score == RouterScore::kSigmoid ? v / total : v) / kSeq;
        }
        for (int64_t j = 0; j < k; ++j) chose[r.chosen[row][j].item<int64_t>()] += 1.0 / (kSeq * k);
        const at::Tensor l = r.logits[row];
        const double lse = std::log(l.exp().sum().item<double>());
        z += lse * lse / (kBatch * kSeq);
      }
      double sum = 0;
      for (int64_t e = 0; e < e_count; ++e) sum += chose[e] * score[e];
      balance += e_count * sum / kBatch;
    }
    EXPECT_NEAR(load_balancing_loss(r, kSeq, config.score).item<double>(), balance, 1e-6);
    EXPECT_NEAR(router_z_loss(r).item<double>(), z, 1e-5);
    const at::Tensor counts = tokens_per_expert(r, e_count);
    EXPECT_EQ(counts.sum().item<double>(), kBatch * kSeq * k);
  }
  // Even use gives 1: every expert chosen equally and scored equally.
  Routing even;
  even.scores = at::full({4, 4}, 0.25);
  even.chosen = at::tensor({0, 1, 2, 3}, at::kLong).view({4, 1});
  EXPECT_NEAR(load_balancing_loss(even, 4, RouterScore::kSoftmax).item<double>(), 1.0, 1e-12);
}

TEST(MoeFeedForward, SplittingTheBatchChangesNothing) {
  for (const MoeConfig& config : cases()) {
    MoeFeedForward layer = make_layer(config);
    const at::Tensor x = at::randn({4, kSeq, kDim});
    const at::Tensor whole = layer(x);
    const auto whole_stats = module::take_statistics();
    const at::Tensor halves = at::cat({layer(x.narrow(0, 0, 2)), layer(x.narrow(0, 2, 2))});
    const auto halves_stats = module::take_statistics();
    EXPECT_TRUE(at::allclose(whole, halves, 1e-6, 1e-6));
    // Two passes of two sequences: their mean is the whole's one pass of four.
    EXPECT_NEAR(halves_stats.at("moe.load_balancing_loss").item<double>() / 2,
                whole_stats.at("moe.load_balancing_loss").item<double>(), 1e-6);
    EXPECT_TRUE(at::equal(halves_stats.at("moe.tokens_per_expert"),
                          whole_stats.at("moe.tokens_per_expert")));
    EXPECT_EQ(halves_stats.at("moe.dropped_tokens").item<double>(),
              whole_stats.at("moe.dropped_tokens").item<double>());
    EXPECT_EQ(halves_stats.at("moe.passes").item<double>(), 2);
  }
}

// The gradient backward gives the router: of the output's objective, plus the auxiliary
// loss's times the scale in force at the forward.
TEST(MoeFeedForward, TheAuxiliaryLossReachesTheRouterScaled) {
  MoeConfig config{.experts = 4, .experts_per_token = 2};
  config.router_aux_loss_coef = 0.3;
  config.router_z_loss_coef = 0.05;
  MoeFeedForward layer = make_layer(config);
  const at::Tensor x = at::randn({kBatch, kSeq, kDim});
  const at::Tensor target = at::randn({kBatch, kSeq, kDim});
  constexpr double kScale = 0.25;

  layer->eval();
  (layer(x) * target).sum().backward();
  const at::Tensor plain = gradients(*layer).at("router");
  const Routing r = layer->route(x.reshape({-1, kDim}), kSeq);
  (config.router_aux_loss_coef * load_balancing_loss(r, kSeq, config.score) +
   config.router_z_loss_coef * router_z_loss(r))
      .backward();
  const at::Tensor aux = gradients(*layer).at("router");
  ASSERT_GT(aux.abs().max().item<double>(), 1e-4) << "the auxiliary loss has no gradient";

  layer->train();
  for (bool checkpointed : {false, true}) {
    SCOPED_TRACE(checkpointed ? "checkpointed" : "plain");
    at::Tensor out;
    {
      const module::AuxiliaryLossScale scale(kScale);
      if (checkpointed) {
        out = module::checkpointed(
            [&](const module::Activation& in) { return module::Activation{layer(in[0])}; },
            {x.clone().requires_grad_(true)}, layer->parameters())[0];
      } else {
        out = layer(x);
      }
    }
    (out * target).sum().backward();
    const at::Tensor router = gradients(*layer).at("router");
    EXPECT_TRUE(at::allclose(router, plain + kScale * aux, 1e-5, 1e-6))
        << (router - plain - kScale * aux).abs().max();
    // The statistics count the first forward only, not the recomputation.
    EXPECT_EQ(module::take_statistics().at("moe.passes").item<double>(), 1);
  }
}

}  // namespace
}  // namespace pipetrain::models
