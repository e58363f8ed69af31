#include "pipetrain/models/gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "pipetrain/errors.h"

namespace pipetrain::models {
namespace {

constexpr double kInitStd = 0.02;

struct GptEmbeddingImpl : torch::nn::Module {
  GptEmbeddingImpl(const GptConfig& c)
      : tokens(register_module("tokens", torch::nn::Embedding(c.vocab_size, c.d_model))),
        positions(register_module("positions", torch::nn::Embedding(c.context, c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {
    torch::nn::init::normal_(tokens->weight, 0.0, kInitStd);
    torch::nn::init::normal_(positions->weight, 0.0, kInitStd);
  }

  at::Tensor forward(const at::Tensor& ids) {
    const at::Tensor where = at::arange(ids.size(1), ids.options());
    return dropout(tokens(ids) + positions(where));
  }

  torch::nn::Embedding tokens;
  torch::nn::Embedding positions;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(GptEmbedding);

struct GptBlockImpl : torch::nn::Module {
  GptBlockImpl(const GptConfig& c)
      : heads(c.heads),
        dropout_p(c.dropout),
        attention_norm(register_module(
            "attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        qkv(register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model))),
        projection(register_module("projection", torch::nn::Linear(c.d_model, c.d_model))),
        mlp_norm(register_module("mlp_norm",
                                 torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
        expand(register_module("expand", torch::nn::Linear(c.d_model, 4 * c.d_model))),
        contract(register_module("contract", torch::nn::Linear(4 * c.d_model, c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {
    for (auto* linear : {&qkv, &projection, &expand, &contract}) {
      torch::nn::init::normal_((*linear)->weight, 0.0, kInitStd);
      torch::nn::init::zeros_((*linear)->bias);
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    x_shape_check(x);
    const int64_t batch = x.size(0), seq = x.size(1), d = x.size(2);
    const auto split =
        qkv(attention_norm(x)).view({batch, seq, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    const at::Tensor attended =
        at::scaled_dot_product_attention(split[0], split[1], split[2], /*attn_mask=*/{},
                                         is_training() ? dropout_p : 0.0, /*is_causal=*/true);
    const at::Tensor merged = attended.transpose(1, 2).reshape({batch, seq, d});
    const at::Tensor h = x + dropout(projection(merged));
    return h + dropout(contract(at::gelu(expand(mlp_norm(h)))));
  }

  void x_shape_check(const at::Tensor& x) const {
    if (x.dim() != 3)
      throw std::invalid_argument("a GPT block takes [batch, seq, d_model] activations");
  }

  int64_t heads;
  double dropout_p;
  torch::nn::LayerNorm attention_norm;
  torch::nn::Linear qkv;
  torch::nn::Linear projection;
  torch::nn::LayerNorm mlp_norm;
  torch::nn::Linear expand;
  torch::nn::Linear contract;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(GptBlock);

void check(const GptConfig& c) {
  auto positive = [](int64_t v, const char* key) {
    if (v < 1)
      throw InputError(std::string("model.") + key + " must be at least 1, got " +
                       std::to_string(v));
  };
  positive(c.vocab_size, "vocab_size");
  positive(c.context, "context");
  positive(c.d_model, "d_model");
  positive(c.heads, "heads");
  positive(c.layers, "layers");
  if (c.d_model % c.heads != 0) {
    throw InputError("model.d_model (" + std::to_string(c.d_model) +
                     ") must be divisible by model.heads (" + std::to_string(c.heads) + ")");
  }
  if (c.dropout < 0 || c.dropout >= 1) throw InputError("model.dropout must be in [0, 1)");
}

}  // namespace

std::vector<LayerSpec> gpt_layers(const GptConfig& c) {
  check(c);
  const int64_t d = c.d_model;
  std::vector<LayerSpec> specs;

  LayerSpec embedding = module_layer<GptEmbedding>(
      "GptEmbedding", [c] { return GptEmbedding(c); },
      [c] { return (c.vocab_size + c.context) * c.d_model; });
  if (c.tie_embeddings) {
    embedding.tie_key = "embed";
    embedding.tied_parameters = {"tokens.weight"};
  }
  specs.push_back(embedding);

  const int64_t block_parameters =
      2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d);
  for (int64_t i = 0; i < c.layers; ++i) {
    specs.push_back(module_layer<GptBlock>(
        "GptBlock", [c] { return GptBlock(c); }, [=] { return block_parameters; }));
  }
  specs.push_back(module_layer<torch::nn::LayerNorm>(
      "LayerNorm", [d] { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})); },
      [d] { return 2 * d; }));

  if (c.tie_embeddings) {
    LayerSpec head = embedding;
    head.type = "GptHead";
    head.tied_forward = [](torch::nn::Module& module, const Activation& x) {
      const auto& tokens = static_cast<GptEmbeddingImpl&>(module).tokens->weight;
      return Activation{at::matmul(x.at(0), tokens.t())};
    };
    specs.push_back(head);
  } else {
    const int64_t vocab = c.vocab_size;
    specs.push_back(module_layer<torch::nn::Linear>(
        "GptHead",
        [=] {
          torch::nn::Linear head(torch::nn::LinearOptions(d, vocab).bias(false));
          torch::nn::init::normal_(head->weight, 0.0, kInitStd);
          return head;
        },
        [=] { return d * vocab; }));
  }
  return specs;
}

at::Tensor gpt_loss(const Activation& logits, const Activation& labels) {
  const at::Tensor& l = logits.at(0);
  return at::cross_entropy_loss(l.reshape({-1, l.size(-1)}), labels.at(0).reshape({-1}));
}

}  // namespace pipetrain::models
