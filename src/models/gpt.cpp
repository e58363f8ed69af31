#include "pipetrain/models/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>

#include "layer_rules.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/kv_cache.h"
#include "pipetrain/tensor_parallel/collectives.h"
#include "pipetrain/tensor_parallel/initialization.h"
#include "pipetrain/tensor_parallel/layers.h"

namespace pipetrain::models {
namespace {

constexpr tensor_parallel::LinearOptions kGptLinear{.bias = true, .init_std = kInitStd};

using tensor_parallel::ColumnParallelLinear;
using tensor_parallel::Group;
using tensor_parallel::RowParallelLinear;
using tensor_parallel::VocabParallelEmbedding;

// Token embeddings split by vocabulary over the tensor-parallel group; positions are
// replicated.
struct GptEmbeddingImpl : torch::nn::Module {
  GptEmbeddingImpl(const GptConfig& c, const Group& group)
      : tokens(register_module("tokens",
                               VocabParallelEmbedding(c.vocab_size, c.d_model, group, kInitStd))),
        positions(register_module("positions", torch::nn::Embedding(c.context, c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {
    tensor_parallel::init_normal(positions->weight, kInitStd);
  }

  at::Tensor forward(const at::Tensor& ids) {
    // With a KV cache the new tokens follow the cached positions.
    const int64_t first = active_kv_cache() ? active_kv_cache()->length() : 0;
    if (first + ids.size(1) > positions->weight.size(0)) {
      throw std::invalid_argument("a GPT of context " + std::to_string(positions->weight.size(0)) +
                                  " got position " + std::to_string(first + ids.size(1) - 1));
    }
    const at::Tensor where = at::arange(first, first + ids.size(1), ids.options());
    return dropout(tokens(ids) + positions(where));
  }

  VocabParallelEmbedding tokens;
  torch::nn::Embedding positions;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(GptEmbedding);

// Megatron's tensor-parallel block: each rank of the group computes heads / size
// attention heads and 4 d / size MLP features; the residual stream, the LayerNorms and
// the output biases are replicated.
struct GptBlockImpl : torch::nn::Module {
  GptBlockImpl(const GptConfig& c, const Group& group_)
      : group(group_),
        heads(c.heads),
        local_heads(c.heads / group.size()),
        dropout_p(c.dropout),
        gelu_approximation(c.gelu == Gelu::kTanh ? "tanh" : "none"),
        attention_norm(register_module(
            "attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        qkv(register_module("qkv", ColumnParallelLinear(c.d_model, 3 * c.d_model, group, kGptLinear,
                                                        /*stride=*/3))),
        projection(register_module("projection",
                                   RowParallelLinear(c.d_model, c.d_model, group, kGptLinear))),
        mlp_norm(register_module("mlp_norm",
                                 torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        expand(register_module("expand",
                               ColumnParallelLinear(c.d_model, 4 * c.d_model, group, kGptLinear))),
        contract(register_module("contract",
                                 RowParallelLinear(4 * c.d_model, c.d_model, group, kGptLinear))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  at::Tensor forward(const at::Tensor& x) {
    if (x.dim() != 3)
      throw std::invalid_argument("a GPT block takes [batch, seq, d_model] activations");
    const int64_t batch = x.size(0), seq = x.size(1);
    const at::Tensor local_qkv = qkv(attention_norm(x));  // [batch, seq, 3 * local width]
    const int64_t width = local_qkv.size(2) / 3;
    const auto split =
        local_qkv.view({batch, seq, 3, local_heads, width / local_heads}).permute({2, 0, 3, 1, 4});
    const at::Tensor attended = attend(split[0], split[1], split[2]);
    const at::Tensor merged = attended.transpose(1, 2).reshape({batch, seq, width});
    const at::Tensor h = x + dropout(projection(merged));
    return h + dropout(contract(at::gelu(expand(mlp_norm(h)), gelu_approximation)));
  }

  // Causal attention over this rank's heads ([batch, local heads, seq, head dim] each).
  // With dropout in training the weights are computed here instead of by the fused
  // kernel: the dropout mask is drawn for every head of the whole model and sliced to this
  // rank's heads, so all ranks of the group draw alike (the dropout of their replicated
  // activations stays in step) and training does not depend on the model-parallel size.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) const {
    if (KvCache* cache = active_kv_cache()) return cached_attention(*cache, this, q, k, v);
    if (!is_training() || dropout_p == 0)
      return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, 0.0, /*is_causal=*/true);
    const int64_t batch = q.size(0), seq = q.size(2);
    const at::Tensor future = at::ones({seq, seq}, q.options().dtype(at::kBool)).triu(1);
    const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
    const at::Tensor weights =
        at::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
    const at::Tensor keep = at::empty({batch, heads, seq, seq}, q.options().dtype(at::kFloat))
                                .bernoulli_(1 - dropout_p)
                                .narrow(1, group.rank() * local_heads, local_heads)
                                .to(q.scalar_type());
    return at::matmul(weights * keep / (1 - dropout_p), v);
  }

  Group group;
  int64_t heads;  // of the whole model
  int64_t local_heads;
  double dropout_p;
  std::string gelu_approximation;  // at::gelu's name for it
  torch::nn::LayerNorm attention_norm;
  ColumnParallelLinear qkv;
  RowParallelLinear projection;
  torch::nn::LayerNorm mlp_norm;
  ColumnParallelLinear expand;
  RowParallelLinear contract;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(GptBlock);

void check(const GptConfig& c, const Group& group) {
  require_positive(c.vocab_size, "vocab_size");
  require_positive(c.context, "context");
  require_positive(c.d_model, "d_model");
  require_positive(c.heads, "heads");
  require_positive(c.layers, "layers");
  require_divisible(c.d_model, "d_model", c.heads, "model.heads");
  if (c.dropout < 0 || c.dropout >= 1) throw io::InputError("model.dropout must be in [0, 1)");
  require_divisible(c.heads, "heads", group.size(), "the model-parallel size");
  require_divisible(c.vocab_size, "vocab_size", group.size(), "the model-parallel size");
}

}  // namespace

std::vector<module::LayerSpec> gpt_layers(const GptConfig& c, const Group& group) {
  check(c, group);
  const int64_t d = c.d_model;
  std::vector<module::LayerSpec> specs;

  module::LayerSpec embedding = module::module_layer<GptEmbedding>(
      "GptEmbedding", [c, group] { return GptEmbedding(c, group); },
      [c] { return (c.vocab_size + c.context) * c.d_model; });
  embedding.no_weight_decay = {"tokens.weight", "positions.weight"};
  if (c.tie_embeddings) {
    embedding.tie_key = "embed";
    embedding.tied_parameters = {"tokens.weight"};
  }
  specs.push_back(embedding);

  const int64_t block_parameters =
      2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d);
  for (int64_t i = 0; i < c.layers; ++i) {
    specs.push_back(module::module_layer<GptBlock>(
        "GptBlock", [c, group] { return GptBlock(c, group); }, [=] { return block_parameters; }));
  }
  specs.push_back(module::module_layer<torch::nn::LayerNorm>(
      "LayerNorm", [d] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})); },
      [d] { return 2 * d; }));

  if (c.tie_embeddings) {
    specs.push_back(tied_head<GptEmbeddingImpl>(embedding, "GptHead", group));
  } else {
    const int64_t vocab = c.vocab_size;
    specs.push_back(module::module_layer<ColumnParallelLinear>(
        "GptHead",
        [=] {
          return ColumnParallelLinear(
              d, vocab, group, tensor_parallel::LinearOptions{.bias = false, .init_std = kInitStd});
        },
        [=] { return d * vocab; }));
  }
  return specs;
}

module::LossFunction gpt_loss(const Group& group) {
  return [group](const module::Activation& logits, const module::Activation& labels) {
    return tensor_parallel::vocab_parallel_cross_entropy(logits.at(0), labels.at(0), group);
  };
}

}  // namespace pipetrain::models
