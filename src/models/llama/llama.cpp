#include "models/llama/llama.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/kv_cache.h"
#include "models/layer_rules.h"
#include "models/moe/moe.h"
#include "models/packed_documents.h"
#include "pipetrain/module/recompute.h"
#include "pipetrain/tensor_parallel/layers.h"
#include "rotary.h"
#include "tensor_parallel/collectives.h"
#include "tensor_parallel/sequence_parallel.h"

namespace pipetrain::models {
namespace {

constexpr tensor_parallel::LinearOptions kLlamaLinear{.bias = false, .init_std = kInitStd};

// Each routed expert's MLP width: moe_intermediate_size, or the decoder's (Mixtral).
int64_t expert_width(const LlamaConfig& c, const MoeConfig& m) {
  return m.moe_intermediate_size > 0 ? m.moe_intermediate_size : c.intermediate_size;
}

// A q, k or v projection's options: with biases in Qwen2.
constexpr tensor_parallel::LinearOptions projection(bool bias) {
  return {.bias = bias, .init_std = kInitStd};
}

using tensor_parallel::ColumnParallelLinear;
using tensor_parallel::Group;
using tensor_parallel::RowParallelLinear;
using tensor_parallel::VocabParallelEmbedding;
using ContextGroup = context_parallel::Group;

// What a norm's input holds of the group's work, which decides how its weight's gradient
// is summed over the tensor-parallel group.
enum class NormOver {
  kStream,  // the residual stream: replicated, or this rank's slice of the sequence
  kHeads,   // this rank's attention heads (q/k norms): every rank's part of the gradient
};

// Root-mean-square normalisation with a learned scale, computed in float32 whatever the
// activations' type (as transformers' LlamaRMSNorm); under sequence parallelism on this
// rank's slice of the sequence.
// With `unit_offset` (Gemma's), the scale is 1 + w, w starting at 0, applied in float32
// before the cast back (transformers' Gemma3RMSNorm).
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps_, Group group_, NormOver over_ = NormOver::kStream,
              bool unit_offset_ = false)
      : eps(eps_),
        group(std::move(group_)),
        over(over_),
        unit_offset(unit_offset_),
        weight(register_parameter("weight", unit_offset ? at::zeros({dim}) : at::ones({dim}))) {}

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor wide = x.to(at::kFloat);
    const at::Tensor normed = wide * at::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps);
    const at::Tensor scale = over == NormOver::kHeads
                                 ? tensor_parallel::copy_to_group(weight, group)
                                 : tensor_parallel::sequence_shared(weight, group);
    if (unit_offset) return (normed * (scale.to(at::kFloat) + 1)).to(x.scalar_type());
    return scale * normed.to(x.scalar_type());
  }

  double eps;
  Group group;
  NormOver over;
  bool unit_offset;
  at::Tensor weight;
};
TORCH_MODULE(RmsNorm);

// What decides the rotation of a window (no packed documents): every block of a stage
// rotates the same positions.
struct WindowRotation {
  // Positions [first, first + length) of the window (one first), or of each row after its
  // own cached positions (a first per row), or this rank's under context parallelism
  // (ring size > 1).
  std::vector<int64_t> firsts;
  int64_t length;
  int64_t ring_rank, ring_size;
  Rope rope;
  at::ScalarType type;
  at::Device device;
  bool inference;  // made under InferenceMode: not for a graph autograd records
  bool operator==(const WindowRotation&) const = default;
};

// The rotation of the positions `key` names (made by `positions` when needed), computed
// once for a stage's blocks (as transformers' LlamaModel computes it once per forward), not
// once per block: the last few are kept on this thread (a stage's blocks run on its
// thread), enough for the ropes a model alternates (Gemma 3: local and global).
const Rotation& window_rotation(const WindowRotation& key,
                                const std::function<at::Tensor()>& positions,
                                const at::Tensor& like) {
  constexpr std::size_t kKept = 4;
  thread_local std::deque<std::pair<WindowRotation, Rotation>> recent;  // newest first
  const auto found = std::find_if(recent.begin(), recent.end(),
                                  [&](const auto& entry) { return entry.first == key; });
  if (found != recent.end()) return found->second;
  recent.emplace_front(key, rotation(positions(), key.rope, like));
  if (recent.size() > kKept) recent.pop_back();  // references to the others stay valid
  return recent.front().second;
}

// The causal mask of `seq` positions, each seeing the last `window` (0: all before it),
// made once for a stage's blocks like window_rotation, not once per block.
const at::Tensor& sequence_mask(int64_t seq, int64_t window, at::Device device) {
  struct Key {
    int64_t seq;
    int64_t window;
    at::Device device;
    bool inference;  // made under InferenceMode: not for a graph autograd records
    bool operator==(const Key&) const = default;
  };
  thread_local std::optional<std::pair<Key, at::Tensor>> last;
  const Key key{seq, window, device, c10::InferenceMode::is_enabled()};
  if (!last || !(last->first == key))
    last.emplace(key, causal_window_mask(0, seq, 0, seq, window, device));
  return last->second;
}

// Token embeddings split by vocabulary over the tensor-parallel group; under context
// parallelism of this rank's load-balanced slice of the sequence.
// Gemma's are multiplied by √d_model (rounded to float32, then to the weights' type, as
// transformers' Gemma3TextScaledWordEmbedding).
struct LlamaEmbeddingImpl : torch::nn::Module {
  LlamaEmbeddingImpl(const LlamaConfig& c, const Group& group, const ContextGroup& context_)
      : context(context_),
        scale(c.scaled_embeddings ? static_cast<float>(std::sqrt(static_cast<double>(c.d_model)))
                                  : 0.0f),
        tokens(register_module("tokens",
                               VocabParallelEmbedding(c.vocab_size, c.d_model, group, kInitStd))) {}

  // Packed documents ([batch, seq], or undefined) pass by: the blocks' rotary embeddings
  // and attention read them.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& /*documents*/) {
    const at::Tensor x = tokens(context_parallel::take_local(ids, 1, context));
    if (scale == 0) return x;
    return x * at::scalar_tensor(scale, x.options().dtype(at::kFloat)).to(x.scalar_type());
  }

  ContextGroup context;
  float scale;  // 0: not scaled
  VocabParallelEmbedding tokens;
};
TORCH_MODULE(LlamaEmbedding);

// A decoder block. Each rank of the tensor-parallel group computes heads / size query
// heads, the num_key_value_heads / size key/value heads they read, and intermediate_size
// / size MLP features; the residual stream and the norms are replicated (split along the
// sequence under sequence parallelism). With `moe`, the MLP is a mixture of experts of
// intermediate_size each (Mixtral).
struct LlamaBlockImpl : torch::nn::Module {
  // `layer`: the block's index among the decoder's blocks (which decides its window).
  LlamaBlockImpl(const LlamaConfig& c, int64_t layer, const std::optional<MoeConfig>& moe_config,
                 const Group& group, const ContextGroup& context_,
                 const expert_parallel::Group& experts)
      : context(context_),
        head_dim(c.head_width()),
        rope(rope_of(c, layer)),
        window(c.slides(layer) ? c.sliding_window : 0),
        // Scores scaled by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 (Gemma):
        // the queries scaled by the ratio's root, the attention kernels unchanged.
        query_scale(c.query_pre_attn_scalar > 0
                        ? std::sqrt(static_cast<double>(head_dim) / c.query_pre_attn_scalar)
                        : 1.0),
        gelu(c.gelu_mlp),
        attention_norm(register_module(
            "attention_norm",
            RmsNorm(c.d_model, c.rms_norm_eps, group, NormOver::kStream, c.unit_offset_norms))),
        q_proj(register_module("q_proj", ColumnParallelLinear(c.d_model, c.heads * head_dim, group,
                                                              projection(c.qkv_bias)))),
        k_proj(register_module(
            "k_proj", ColumnParallelLinear(c.d_model, c.num_key_value_heads * head_dim, group,
                                           projection(c.qkv_bias)))),
        v_proj(register_module(
            "v_proj", ColumnParallelLinear(c.d_model, c.num_key_value_heads * head_dim, group,
                                           projection(c.qkv_bias)))),
        o_proj(register_module(
            "o_proj", RowParallelLinear(c.heads * head_dim, c.d_model, group, kLlamaLinear))),
        mlp_norm(register_module("mlp_norm", RmsNorm(c.d_model, c.rms_norm_eps, group,
                                                     NormOver::kStream, c.unit_offset_norms))) {
    if (c.qk_norm) {
      q_norm = register_module("q_norm", RmsNorm(head_dim, c.rms_norm_eps, group, NormOver::kHeads,
                                                 c.unit_offset_norms));
      k_norm = register_module("k_norm", RmsNorm(head_dim, c.rms_norm_eps, group, NormOver::kHeads,
                                                 c.unit_offset_norms));
    }
    if (c.sandwich_norms) {  // Gemma: the attention's and the MLP's outputs normed too
      attention_out_norm = register_module(
          "attention_out_norm",
          RmsNorm(c.d_model, c.rms_norm_eps, group, NormOver::kStream, c.unit_offset_norms));
      mlp_out_norm = register_module(
          "mlp_out_norm",
          RmsNorm(c.d_model, c.rms_norm_eps, group, NormOver::kStream, c.unit_offset_norms));
    }
    if (moe_config) {
      moe = register_module("moe", MoeFeedForward(c.d_model, expert_width(c, *moe_config),
                                                  *moe_config, group, kInitStd, experts));
      return;
    }
    gate_proj = register_module(
        "gate_proj", ColumnParallelLinear(c.d_model, c.intermediate_size, group, kLlamaLinear));
    up_proj = register_module(
        "up_proj", ColumnParallelLinear(c.d_model, c.intermediate_size, group, kLlamaLinear));
    down_proj = register_module(
        "down_proj", RowParallelLinear(c.intermediate_size, c.d_model, group, kLlamaLinear));
  }

  // documents: packed documents' ids [batch, whole seq], or undefined.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& documents) {
    if (x.dim() != 3)
      throw std::invalid_argument("a LLaMA block takes [batch, seq, d_model] activations");
    const at::Tensor attended = o_proj(attend(normed(attention_norm, x), documents));
    const at::Tensor h = x + (attention_out_norm ? normed(attention_out_norm, attended) : attended);
    const at::Tensor n = normed(mlp_norm, h);
    const at::Tensor fed =
        !moe ? mlp(n)
             : module::recomputed(
                   module::RecomputeKind::kExperts,
                   [this](const std::vector<at::Tensor>& in) { return moe(in[0]); }, {n},
                   moe->parameters());
    return h + (mlp_out_norm ? normed(mlp_out_norm, fed) : fed);
  }

  // Causal grouped-query attention over this rank's heads (within each document when
  // packed); returns [batch, seq, width] (the whole sequence: under sequence parallelism
  // the projections gather it).
  at::Tensor attend(const at::Tensor& x, const at::Tensor& documents) {
    auto heads_of = [&](const at::Tensor& projected, RmsNorm& norm) {  // [batch, heads, seq, hd]
      at::Tensor heads = projected.view({projected.size(0), projected.size(1), -1, head_dim});
      if (norm) heads = norm(heads);  // Qwen3: each head normalised before rotation
      return heads.transpose(1, 2);
    };
    RmsNorm none{nullptr};
    const at::Tensor q = heads_of(q_proj(x), q_norm), k = heads_of(k_proj(x), k_norm),
                     v = heads_of(v_proj(x), none);
    const int64_t batch = q.size(0), seq = q.size(2);
    const KvRows& cached = active_kv_rows();  // the new positions follow the cached ones
    if (!cached.empty() && documents.defined())
      throw std::logic_error("packed documents are for training: a KV cache is active");
    const bool ring = context_parallel::splits(context);
    // The window positions of this rank's tokens, which order the causal mask.
    const int64_t first = cached.size() == 1 ? cached[0].length() : 0;
    const at::Tensor where = ring ? context_parallel::local_positions(
                                        seq * context.size(), context.rank(), context.size())
                                  : at::arange(first, first + seq, at::kLong);
    // Rotary angles: of the window positions, of each row's positions after its own cached
    // ones ([batch, seq]), or of each token's position in its document ([batch, seq]).
    const bool rows = cached.size() > 1;
    auto window_positions = [&] { return rows ? cached.positions(seq).to(q.device()) : where; };
    at::Tensor rotary;
    if (documents.defined()) {
      rotary = document_positions(documents);
      if (ring) rotary = rotary.index_select(1, where.to(rotary.device()));
    }
    const Rotation r =
        documents.defined()
            ? rotation(rotary, rope, q)
            : window_rotation({.firsts = rows ? cached.lengths() : std::vector<int64_t>{first},
                               .length = seq,
                               .ring_rank = ring ? context.rank() : 0,
                               .ring_size = ring ? context.size() : 1,
                               .rope = rope,
                               .type = q.scalar_type(),
                               .device = q.device(),
                               .inference = c10::InferenceMode::is_enabled()},
                              window_positions, q);
    const at::Tensor rk = rotate(k, r);
    const at::Tensor rq = query_scale == 1.0 ? rotate(q, r) : rotate(q, r) * query_scale;
    const at::Tensor attended =
        !cached.empty()
            ? cached_attention(cached, this, rq, rk, v, /*grouped_query=*/true, window)
            : module::recomputed(module::RecomputeKind::kAttention,
                                 [this, documents, where](const std::vector<at::Tensor>& in) {
                                   return core_attention(in[0], in[1], in[2], documents, where);
                                 },
                                 {rq, rk, v}, {});
    return attended.transpose(1, 2).reshape({batch, seq, -1});
  }

  // Softmax attention of rotated queries and keys [batch, heads, seq, head_dim] over the
  // sequence (around the ring under context parallelism; `where`: this rank's positions).
  at::Tensor core_attention(const at::Tensor& rq, const at::Tensor& rk, const at::Tensor& v,
                            const at::Tensor& documents, const at::Tensor& where) const {
    if (context_parallel::splits(context)) {
      context_parallel::RingAttentionOptions options;
      if (documents.defined())
        options.documents = context_parallel::take_local(documents, 1, context);
      return context_parallel::ring_attention(rq, rk, v, where, context, options);
    }
    const int64_t seq = rq.size(2);
    if (documents.defined() || (window > 0 && seq > window)) {
      at::Tensor mask = sequence_mask(seq, window, rq.device());
      if (documents.defined()) mask = mask & document_mask(documents);
      return at::scaled_dot_product_attention(rq, rk, v, mask, 0.0, /*is_causal=*/false,
                                              /*scale=*/{}, /*enable_gqa=*/true);
    }
    return at::scaled_dot_product_attention(rq, rk, v, /*attn_mask=*/{}, 0.0,
                                            /*is_causal=*/true, /*scale=*/{},
                                            /*enable_gqa=*/true);
  }

  // RMSNorm `norm` of x, recomputed in backward with the norms.
  static at::Tensor normed(const RmsNorm& norm, const at::Tensor& x) {
    return module::recomputed(
        module::RecomputeKind::kNorms,
        [impl = norm.ptr()](const std::vector<at::Tensor>& in) { return impl->forward(in[0]); },
        {x}, norm->parameters());
  }

  // The gated MLP (SwiGLU, or GeGLU in Gemma), recomputed whole, or its activation and
  // output projection.
  at::Tensor mlp(const at::Tensor& n) {
    std::vector<at::Tensor> parameters;
    for (const torch::nn::Module* part : {static_cast<torch::nn::Module*>(gate_proj.get()),
                                          static_cast<torch::nn::Module*>(up_proj.get()),
                                          static_cast<torch::nn::Module*>(down_proj.get())}) {
      const std::vector<at::Tensor> own = part->parameters();
      parameters.insert(parameters.end(), own.begin(), own.end());
    }
    return module::recomputed(
        module::RecomputeKind::kMlp,
        [this](const std::vector<at::Tensor>& in) {
          return module::recomputed(
              module::RecomputeKind::kMlpActivation,
              [this](const std::vector<at::Tensor>& f) {
                return down_proj((gelu ? at::gelu(f[0], "tanh") : at::silu(f[0])) * f[1]);
              },
              {gate_proj(in[0]), up_proj(in[0])}, down_proj->parameters());
        },
        {n}, parameters);
  }

  ContextGroup context;
  int64_t head_dim;
  Rope rope;
  int64_t window;  // sliding window, or 0
  double query_scale;
  bool gelu;  // the MLP's activation: GELU (tanh), else SiLU
  RmsNorm attention_norm;
  ColumnParallelLinear q_proj, k_proj, v_proj;
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3's and Gemma's
  RowParallelLinear o_proj;
  RmsNorm mlp_norm;
  RmsNorm attention_out_norm{nullptr}, mlp_out_norm{nullptr};  // Gemma's
  ColumnParallelLinear gate_proj{nullptr}, up_proj{nullptr};   // a dense block's MLP
  RowParallelLinear down_proj{nullptr};
  MoeFeedForward moe{nullptr};  // a Mixtral block's
};
TORCH_MODULE(LlamaBlock);

void check(const MoeConfig& m, const Group& group, const ContextGroup& context,
           const expert_parallel::Group& experts) {
  if (m.moe_intermediate_size > 0)
    require_size(m.moe_intermediate_size, "moe_intermediate_size", kMaxWidth);
  require_size(m.experts, "experts", kMaxExperts);
  require_size(m.experts_per_token, "experts_per_token", kMaxExperts);
  if (m.experts_per_token > m.experts) {
    throw io::InputError("model.experts_per_token (" + std::to_string(m.experts_per_token) +
                         ") must be at most model.experts (" + std::to_string(m.experts) + ")");
  }
  if (m.shared_experts < 0 || m.shared_experts > kMaxExperts) {
    throw io::InputError("model.shared_experts must be in 0.." + std::to_string(kMaxExperts) +
                         ", got " + std::to_string(m.shared_experts));
  }
  require_divisible(m.experts, "experts", experts.size(), "expert_parallel");
  if (!(m.capacity_factor >= 0) || !std::isfinite(m.capacity_factor))
    throw io::InputError("model.capacity_factor must be at least 0 (0: dropless)");
  for (const auto& [key, value] : {std::pair{"router_aux_loss_coef", m.router_aux_loss_coef},
                                   std::pair{"router_z_loss_coef", m.router_z_loss_coef}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      throw io::InputError(std::string("model.") + key +
                           " must be a finite number at least 0 (0: no such loss)");
    }
  }
  // The router's per-sequence statistics and capacities need a sequence's tokens together:
  // the row's capabilities refuse context and sequence parallelism before a build.
  if (context.parallel() || (group.sequence_parallel && group.parallel()))
    throw std::logic_error("a mixture built over split sequences");
}

// The rotation's settings, and the context they allow: up to max_position_embeddings
// (past it with `dynamic`, which grows the base with the sequence).
void check_rotation(const LlamaConfig& c) {
  if (!(c.rope_theta > 0)) throw io::InputError("model.rope_theta must be positive");
  const RopeScaling& r = c.rope_scaling;
  auto positive = [](double value, const char* key) {
    if (!(value > 0) || !std::isfinite(value))
      throw io::InputError(std::string("model.rope_scaling.") + key + " must be positive");
  };
  if (r.type != RopeType::kDefault) {
    positive(r.factor, "factor");
    if (r.factor < 1) throw io::InputError("model.rope_scaling.factor must be at least 1");
  }
  if (r.type == RopeType::kLlama3 || r.type == RopeType::kYarn) {
    if (r.original_max_position_embeddings < 1)
      throw io::InputError(
          "model.rope_scaling.original_max_position_embeddings must be set (at least 1) for "
          "this rope_type");
  }
  if (r.type == RopeType::kLlama3) {
    positive(r.low_freq_factor, "low_freq_factor");
    if (!(r.high_freq_factor > r.low_freq_factor) || !std::isfinite(r.high_freq_factor))
      throw io::InputError("model.rope_scaling.high_freq_factor must be above low_freq_factor");
  }
  if (r.type == RopeType::kYarn) {
    if (!(c.rope_theta > 1)) throw io::InputError("model.rope_theta must be above 1 for yarn");
    positive(r.beta_fast, "beta_fast");
    positive(r.beta_slow, "beta_slow");
    if (!(r.attention_factor >= 0) || !std::isfinite(r.attention_factor))
      throw io::InputError("model.rope_scaling.attention_factor must be at least 0");
  }
  if (r.type == RopeType::kDynamic && c.head_width() <= 2)
    throw io::InputError("model.rope_scaling.rope_type dynamic needs heads wider than 2");
  if (r.type != RopeType::kDynamic && c.context > c.positions())
    throw io::InputError("model.context " + std::to_string(c.context) +
                         " is past model.max_position_embeddings " + std::to_string(c.positions()) +
                         " (the rotation's trained length; rope_type dynamic grows past it)");
}

void check(const LlamaConfig& c, const Group& group, const ContextGroup& context) {
  require_size(c.vocab_size, "vocab_size", kMaxTokens);
  require_size(c.context, "context", kMaxTokens);
  require_size(c.d_model, "d_model", kMaxWidth);
  require_size(c.heads, "heads", kMaxWidth);
  require_size(c.num_key_value_heads, "num_key_value_heads", kMaxWidth);
  require_size(c.intermediate_size, "intermediate_size", kMaxWidth);
  require_size(c.layers, "layers", kMaxWidth);
  if (c.head_dim > 0) {
    require_size(c.head_dim, "head_dim", kMaxWidth);
    require_divisible(c.head_dim, "head_dim", 2, "2 for rotary embeddings");
  } else {
    require_divisible(c.d_model, "d_model", c.heads, "model.heads");
    require_divisible(c.d_model / c.heads, "d_model / heads", 2, "2 for rotary embeddings");
  }
  require_divisible(c.heads, "heads", c.num_key_value_heads, "model.num_key_value_heads");
  if (!(c.rms_norm_eps > 0)) throw io::InputError("model.rms_norm_eps must be positive");
  check_rotation(c);
  if (c.sliding_window > 0 && context_parallel::splits(context))
    throw io::InputError("model.sliding_window: ring attention over context_parallel " +
                         std::to_string(context.size()) +
                         " attends to every earlier position; leave context_parallel out");
  const std::string tp = "the model-parallel size";
  require_divisible(c.heads, "heads", group.size(), tp);
  require_divisible(c.num_key_value_heads, "num_key_value_heads", group.size(), tp);
  require_divisible(c.intermediate_size, "intermediate_size", group.size(), tp);
  require_divisible(c.vocab_size, "vocab_size", group.size(), tp);
  require_sequence_split(c.context, group, context);
}

// The head's logits capped at ±cap: cap · tanh(logits / cap) (Gemma's
// final_logit_softcapping), elementwise, so also on a rank's slice of the vocabulary.
module::LayerSpec capped(module::LayerSpec head, double cap) {
  auto cap_of = [cap](module::Activation y) {
    y.at(0) = at::tanh(y.at(0) / cap) * cap;
    return y;
  };
  if (head.tied_forward) {
    head.tied_forward = [f = head.tied_forward, cap_of](torch::nn::Module& m,
                                                        const module::Activation& x) {
      return cap_of(f(m, x));
    };
    return head;
  }
  head.build = [build = head.build, cap_of] {
    module::Layer layer = build();
    layer.forward = [f = layer.forward, cap_of](const module::Activation& x) {
      return cap_of(f(x));
    };
    return layer;
  };
  return head;
}

module::LayerSpec head_layer(const LlamaConfig& c, const Group& group,
                             const module::LayerSpec& embedding) {
  module::LayerSpec head =
      c.tie_embeddings
          ? tied_head<LlamaEmbeddingImpl>(embedding, "LlamaHead", group)
          : module::module_layer<ColumnParallelLinear>(
                "LlamaHead",
                [=] { return ColumnParallelLinear(c.d_model, c.vocab_size, group, kLlamaLinear); },
                [=] { return c.d_model * c.vocab_size; });
  return c.final_logit_softcapping > 0 ? capped(std::move(head), c.final_logit_softcapping) : head;
}

}  // namespace

std::vector<module::LayerSpec> llama_layers(const LlamaConfig& c, const Group& group,
                                            const ContextGroup& context,
                                            const std::optional<MoeConfig>& moe,
                                            const expert_parallel::Group& experts) {
  check(c, group, context);
  if (moe) check(*moe, group, context, experts);
  if (!moe && experts.parallel())
    throw io::InputError("expert_parallel " + std::to_string(experts.size()) +
                         " splits experts: it needs model.type \"mixtral\"");
  const int64_t d = c.d_model, hd = c.head_width(), q_width = c.heads * hd,
                kv_width = c.num_key_value_heads * hd;
  {
    const double w = static_cast<double>(d), mlps = moe ? moe->experts + moe->shared_experts : 1;
    const double width = static_cast<double>(
        moe ? std::max(c.intermediate_size, expert_width(c, *moe)) : c.intermediate_size);
    require_countable(2.0 * c.vocab_size * w +
                      c.layers * (w * (2.0 * q_width + 2.0 * kv_width) + 3 * w * width * mlps +
                                  (moe ? w * moe->experts : 0)));
  }
  std::vector<module::LayerSpec> specs;

  module::LayerSpec embedding = document_layer<LlamaEmbedding>(
      "LlamaEmbedding", [c, group, context] { return LlamaEmbedding(c, group, context); },
      [c] { return c.vocab_size * c.d_model; });
  embedding.no_weight_decay = {"tokens.weight"};
  if (c.tie_embeddings) {
    embedding.tie_key = "embed";
    embedding.tied_parameters = {"tokens.weight"};
  }
  specs.push_back(embedding);

  const int64_t attention_parameters = 2 * d + 2 * d * q_width + 2 * d * kv_width +
                                       (c.qkv_bias ? q_width + 2 * kv_width : 0) +
                                       (c.qk_norm ? 2 * hd : 0) + (c.sandwich_norms ? 2 * d : 0);
  for (int64_t i = 0; i < c.layers; ++i) {
    // Every block routes in a Mixtral; in a Qwen3-MoE those its sparse step and
    // mlp_only_layers say, the others with a dense MLP.
    const std::optional<MoeConfig> routed = moe && moe->routes(i) ? moe : std::nullopt;
    const int64_t ffn = routed ? expert_width(c, *routed) : c.intermediate_size;
    const int64_t mlp_parameters =
        routed ? routed->experts * (d + 3 * d * ffn) + 3 * d * routed->shared_experts * ffn
               : 3 * d * ffn;
    module::LayerSpec block = document_layer<LlamaBlock>(
        routed ? "MixtralBlock" : "LlamaBlock",
        [c, i, routed, group, context, experts] {
          return LlamaBlock(c, i, routed, group, context, experts);
        },
        [=] { return attention_parameters + mlp_parameters; });
    block.block = i;
    specs.push_back(std::move(block));
  }
  specs.push_back(module::module_layer<RmsNorm>(
      "RMSNorm",
      [c, group] {
        return RmsNorm(c.d_model, c.rms_norm_eps, group, NormOver::kStream, c.unit_offset_norms);
      },
      [d] { return d; }));
  specs.push_back(head_layer(c, group, embedding));
  return specs;
}

}  // namespace pipetrain::models
