#include "pipetrain/models/gpt/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>

#include "models/kv_cache.h"
#include "models/layer_rules.h"
#include "models/packed_documents.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/recompute.h"
#include "pipetrain/tensor_parallel/layers.h"
#include "tensor_parallel/collectives.h"
#include "tensor_parallel/initialization.h"
#include "tensor_parallel/sequence_parallel.h"

namespace pipetrain::models {
namespace {

constexpr tensor_parallel::LinearOptions kGptLinear{.bias = true, .init_std = kInitStd};

using tensor_parallel::ColumnParallelLinear;
using tensor_parallel::Group;
using tensor_parallel::RowParallelLinear;
using tensor_parallel::VocabParallelEmbedding;
using ContextGroup = context_parallel::Group;

// Token embeddings split by vocabulary over the tensor-parallel group; positions are
// replicated. Under sequence parallelism each rank returns its slice of the sequence, under
// context parallelism its load-balanced slice (and under both, its part of that).
struct GptEmbeddingImpl : torch::nn::Module {
  GptEmbeddingImpl(const GptConfig& c, const Group& group_, const ContextGroup& context_)
      : group(group_),
        context(context_),
        dropout_p(c.dropout),
        tokens(register_module("tokens",
                               VocabParallelEmbedding(c.vocab_size, c.d_model, group, kInitStd))),
        positions(register_module("positions", torch::nn::Embedding(c.context, c.d_model))) {
    tensor_parallel::init_normal(positions->weight, kInitStd);
  }

  // ids [batch, seq]; documents: packed documents' ids [batch, seq], or undefined.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& documents) {
    // With a KV cache the new tokens follow the cached positions (each row's its own).
    const KvRows& cached = active_kv_rows();
    const int64_t last = cached.empty() ? ids.size(1) - 1 : cached.last_position(ids.size(1));
    if (last >= positions->weight.size(0)) {
      throw std::invalid_argument("a GPT of context " + std::to_string(positions->weight.size(0)) +
                                  " got position " + std::to_string(last));
    }
    if (documents.defined() && !cached.empty())
      throw std::logic_error("packed documents are for training: a KV cache is active");
    // Each token's position: in the window, or in its document when packed ([batch, seq]).
    at::Tensor where = documents.defined() ? document_positions(documents)
                       : cached.empty()    ? at::arange(ids.size(1), ids.options())
                                           : cached.positions(ids.size(1)).to(ids.device());
    at::Tensor mine = ids;  // this rank's tokens
    if (context_parallel::splits(context)) {
      const at::Tensor local =
          context_parallel::local_positions(ids.size(1), context.rank(), context.size())
              .to(ids.device());
      mine = ids.index_select(1, local);
      where = where.index_select(where.dim() - 1, local);
    }
    const tensor_parallel::SequenceSlice here =
        tensor_parallel::local_sequence(where.size(-1), group);
    const at::Tensor placed =
        at::embedding(tensor_parallel::sequence_shared(positions->weight, group),
                      where.narrow(-1, here.first, here.length));
    return tensor_parallel::sequence_dropout(tokens(mine) + placed, dropout_p, is_training(), group,
                                             context);
  }

  Group group;
  ContextGroup context;
  double dropout_p;
  VocabParallelEmbedding tokens;
  torch::nn::Embedding positions;
};
TORCH_MODULE(GptEmbedding);

// Megatron's tensor-parallel block: each rank of the group computes heads / size
// attention heads and 4 d / size MLP features; the residual stream, the LayerNorms and
// the output biases are replicated (under sequence parallelism the residual stream is
// split along the sequence, and the LayerNorms and biases see this rank's slice).
struct GptBlockImpl : torch::nn::Module {
  GptBlockImpl(const GptConfig& c, const Group& group_, const ContextGroup& context_)
      : group(group_),
        context(context_),
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
                                 RowParallelLinear(4 * c.d_model, c.d_model, group, kGptLinear))) {}

  // documents: packed documents' ids [batch, whole seq], or undefined.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& documents) {
    if (x.dim() != 3)
      throw std::invalid_argument("a GPT block takes [batch, seq, d_model] activations");
    // [batch, seq, 3 * local width]: the whole sequence under sequence parallelism too.
    const at::Tensor local_qkv = qkv(normed(attention_norm, x));
    const int64_t batch = local_qkv.size(0), seq = local_qkv.size(1), width = local_qkv.size(2) / 3;
    const std::vector<at::Tensor> split =
        local_qkv.view({batch, seq, 3, local_heads, width / local_heads})
            .permute({2, 0, 3, 1, 4})
            .unbind(0);
    const at::Tensor attended =
        module::recomputed(module::RecomputeKind::kAttention,
                           [this, documents](const std::vector<at::Tensor>& in) {
                             return attend(in[0], in[1], in[2], documents);
                           },
                           {split[0], split[1], split[2]}, {});
    const at::Tensor merged = attended.transpose(1, 2).reshape({batch, seq, width});
    const at::Tensor h = x + dropout(projection(merged));
    return h + dropout(mlp(normed(mlp_norm, h)));
  }

  // The GELU MLP, recomputed whole, or its activation and output projection.
  at::Tensor mlp(const at::Tensor& n) {
    std::vector<at::Tensor> parameters = expand->parameters();
    const std::vector<at::Tensor> contracting = contract->parameters();
    parameters.insert(parameters.end(), contracting.begin(), contracting.end());
    return module::recomputed(
        module::RecomputeKind::kMlp,
        [this](const std::vector<at::Tensor>& in) {
          return module::recomputed(
              module::RecomputeKind::kMlpActivation,
              [this](const std::vector<at::Tensor>& f) {
                return contract(at::gelu(f[0], gelu_approximation));
              },
              {expand(in[0])}, contract->parameters());
        },
        {n}, parameters);
  }

  // norm() of x, recomputed in backward with the norms.
  at::Tensor normed(const torch::nn::LayerNorm& layer, const at::Tensor& x) const {
    return module::recomputed(
        module::RecomputeKind::kNorms,
        [this, layer](const std::vector<at::Tensor>& in) { return norm(layer, in[0]); }, {x},
        layer->parameters());
  }

  // A LayerNorm of the residual stream, whose parameters see this rank's slice of the
  // sequence under sequence parallelism.
  at::Tensor norm(const torch::nn::LayerNorm& layer, const at::Tensor& x) const {
    return at::layer_norm(x, layer->options.normalized_shape(),
                          tensor_parallel::sequence_shared(layer->weight, group),
                          tensor_parallel::sequence_shared(layer->bias, group),
                          layer->options.eps());
  }

  at::Tensor dropout(const at::Tensor& x) const {
    return tensor_parallel::sequence_dropout(x, dropout_p, is_training(), group, context);
  }

  bool drops_attention() const { return is_training() && dropout_p > 0; }

  // Which attention weights dropout keeps, 1 or 0 ([batch, local heads, seq, seq] in q's
  // type): drawn for every head of the whole model and sliced to this rank's heads, so all
  // ranks of the group draw alike (the dropout of their replicated activations stays in
  // step) and training does not depend on the model-parallel size.
  // A copy where the group splits the heads: a view would keep every head's mask alive
  // until backward.
  at::Tensor attention_kept(int64_t batch, int64_t seq, const at::Tensor& q) const {
    return at::empty({batch, heads, seq, seq}, q.options().dtype(at::kFloat))
        .bernoulli_(1 - dropout_p)
        .narrow(1, group.rank() * local_heads, local_heads)
        .to(q.scalar_type(), /*non_blocking=*/false, /*copy=*/group.parallel());
  }

  // Causal attention over this rank's heads ([batch, local heads, seq, head dim] each).
  // With dropout in training the weights are computed here instead of by the fused
  // kernel, under the mask attention_kept() draws.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& documents) const {
    if (const KvRows& cached = active_kv_rows(); !cached.empty())
      return cached_attention(cached, this, q, k, v);
    if (context_parallel::splits(context)) return ring_attend(q, k, v, documents);
    if (!drops_attention()) {
      if (!documents.defined())
        return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, 0.0, /*is_causal=*/true);
      return at::scaled_dot_product_attention(q, k, v, document_mask(documents), 0.0);
    }
    const int64_t batch = q.size(0), seq = q.size(2);
    const at::Tensor visible = documents.defined()
                                   ? document_mask(documents)
                                   : at::ones({seq, seq}, q.options().dtype(at::kBool)).tril();
    // The scores are gone once the weights exist: one [batch, heads, seq, seq] temporary.
    const at::Tensor weights = at::softmax(
        (at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1))))
            .masked_fill(visible.logical_not(), -std::numeric_limits<double>::infinity()),
        -1);
    return at::matmul(weights * attention_kept(batch, seq, q) / (1 - dropout_p), v);
  }

  // Attention of this rank's chunks of the sequence over the context group's (ring
  // attention). Under dropout the whole sequence's mask is drawn, as one rank would draw
  // it, and this rank's queries' rows of it kept.
  at::Tensor ring_attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& documents) const {
    const int64_t whole = q.size(2) * context.size();
    const at::Tensor where =
        context_parallel::local_positions(whole, context.rank(), context.size());
    context_parallel::RingAttentionOptions options;
    if (documents.defined())
      options.documents = context_parallel::take_local(documents, 1, context);
    if (drops_attention()) {
      options.dropout_kept =
          context_parallel::take_local(attention_kept(q.size(0), whole, q), 2, context);
      options.dropout_p = dropout_p;
    }
    return context_parallel::ring_attention(q, k, v, where, context, options);
  }

  Group group;
  ContextGroup context;
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
};
TORCH_MODULE(GptBlock);

// The final LayerNorm, as torch::nn::LayerNorm (the same parameters), on this rank's slice
// of the sequence under sequence parallelism.
struct GptFinalNormImpl : torch::nn::Module {
  GptFinalNormImpl(int64_t d, const Group& group_)
      : group(group_),
        weight(register_parameter("weight", at::ones({d}))),
        bias(register_parameter("bias", at::zeros({d}))) {}

  at::Tensor forward(const at::Tensor& x) {
    return at::layer_norm(x, {weight.size(0)}, tensor_parallel::sequence_shared(weight, group),
                          tensor_parallel::sequence_shared(bias, group), kLayerNormEps);
  }

  static constexpr double kLayerNormEps = 1e-5;  // torch::nn::LayerNorm's default
  Group group;
  at::Tensor weight;
  at::Tensor bias;
};
TORCH_MODULE(GptFinalNorm);

void check(const GptConfig& c, const Group& group, const ContextGroup& context) {
  require_size(c.vocab_size, "vocab_size", kMaxTokens);
  require_size(c.context, "context", kMaxTokens);
  require_size(c.d_model, "d_model", kMaxWidth);
  require_size(c.heads, "heads", kMaxWidth);
  require_size(c.layers, "layers", kMaxWidth);
  const double d = static_cast<double>(c.d_model);
  require_countable((2.0 * c.vocab_size + c.context) * d + c.layers * (12 * d * d + 13 * d));
  require_divisible(c.d_model, "d_model", c.heads, "model.heads");
  if (c.dropout < 0 || c.dropout >= 1) throw io::InputError("model.dropout must be in [0, 1)");
  require_divisible(c.heads, "heads", group.size(), "the model-parallel size");
  require_divisible(c.vocab_size, "vocab_size", group.size(), "the model-parallel size");
  require_sequence_split(c.context, group, context);
}

}  // namespace

std::vector<module::LayerSpec> gpt_layers(const GptConfig& c, const Group& group,
                                          const ContextGroup& context) {
  check(c, group, context);
  const int64_t d = c.d_model;
  std::vector<module::LayerSpec> specs;

  module::LayerSpec embedding = document_layer<GptEmbedding>(
      "GptEmbedding", [c, group, context] { return GptEmbedding(c, group, context); },
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
    specs.push_back(document_layer<GptBlock>(
        "GptBlock", [c, group, context] { return GptBlock(c, group, context); },
        [=] { return block_parameters; }));
  }
  specs.push_back(module::module_layer<GptFinalNorm>(
      "LayerNorm", [d, group] { return GptFinalNorm(d, group); }, [d] { return 2 * d; }));

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

module::LossFunction gpt_loss(const Group& group, const ContextGroup& context,
                              tensor_parallel::TokenReduction reduction) {
  return [group, context, reduction](const module::Activation& logits,
                                     const module::Activation& labels) {
    // Under context parallelism: this rank's tokens' mean (or sum); the replicas' average
    // (data x context) of means is the mean over every token when the slices count as many.
    return tensor_parallel::vocab_parallel_cross_entropy(
        logits.at(0), context_parallel::take_local(labels.at(0), 1, context), group, reduction);
  };
}

}  // namespace pipetrain::models
