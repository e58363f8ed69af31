#include <algorithm>

#include "models/layer_cost_parts.h"

namespace pipetrain::models::costs {

namespace {

// A mixture of experts over s tokens, each computed by k of the experts: the router's
// logits, the chosen experts' SwiGLU MLPs (gathered by expert, weighted and summed back)
// and the shared experts'. The router and the routed experts are replicated over a
// tensor-parallel group; the shared experts split over it.
void add_expert_costs(LayerCost& block, const MoeConfig& m, double s, double d, double ffn) {
  LayerCost routed;
  add_linear(routed, s, d, static_cast<double>(m.experts));
  const double chosen = s * static_cast<double>(m.experts_per_token);
  add_linear(routed, chosen, d, 2 * ffn);
  add_linear(routed, chosen, ffn, d);
  block.forward_flops += routed.forward_flops;
  block.backward_input_flops += routed.backward_input_flops;
  block.backward_weight_flops += routed.backward_weight_flops;
  block.replicated_forward_flops = routed.forward_flops;
  block.replicated_backward_input_flops = routed.backward_input_flops;
  block.replicated_backward_weight_flops = routed.backward_weight_flops;
  const double shared = static_cast<double>(m.shared_experts) * ffn;
  add_linear(block, s, d, 2 * shared);
  add_linear(block, s, shared, d);
  // Kept for backward: the gathered inputs and the weighted outputs, each expert's gate,
  // up, silu(gate) and product; the router's logits and scores (float32).
  block.saved += 2 * chosen * d + 4 * chosen * ffn;
  block.saved_fp32 += 2 * s * static_cast<double>(m.experts);
  block.split_saved += 4 * s * shared;
  block.workspace += 2 * chosen * ffn;
  block.traffic += 4 * chosen * d;  // gathered by expert and summed back
  block.dispatched = chosen * d;
}

// A LLaMA-family decoder block: its MLP dense, or with `moe` routed to experts.
LayerCost llama_block(const LlamaConfig& c, const MoeConfig* moe) {
  const int64_t d = c.d_model, s = c.context;
  const int64_t ffn =
      moe && moe->moe_intermediate_size > 0 ? moe->moe_intermediate_size : c.intermediate_size;
  const int64_t hd = c.head_width(), q = c.heads * hd;  // the query width (d unless head_dim)
  const int64_t kv = hd * c.num_key_value_heads;        // key (and value) width
  LayerCost block;
  block.type = moe ? "MixtralBlock" : "LlamaBlock";
  block.block = true;
  // Norms beyond the two every block has: q/k norms per head (Qwen3, Gemma), and Gemma's
  // norms after attention and the MLP (counted with the head norms: replicated, unsplit).
  const int64_t biases = c.qkv_bias ? q + 2 * kv : 0,
                head_norms = (c.qk_norm ? 2 * hd : 0) + (c.sandwich_norms ? 2 * d : 0);
  const int64_t attention = 2 * d * q + 2 * d * kv + biases;
  block.parameters = 2 * d + head_norms + attention + 3 * d * ffn;
  block.split_parameters = block.parameters - 2 * d - head_norms;
  block.largest_tensor = std::max(d * q, d * ffn);  // q/o, or gate/up/down
  add_linear(block, s, d, q + 2 * kv);
  // A sliding window is a mask over the whole square: the kernels compute all of it.
  add_attention(block, s, q);
  add_linear(block, s, q, d);
  block.saved = static_cast<double>(4 * s * d);
  // The rotated q and k, v and the attention output, as the fused kernel keeps them (the
  // rotation multiplies q and k by constant tables, which keep neither; the merged heads are
  // a view of the output). Measured: bench/sequence_parallel_memory. Q/k norms keep their
  // inputs too.
  block.split_saved = static_cast<double>(s * (2 * q + 2 * kv) + (c.qk_norm ? s * (q + kv) : 0));
  block.saved_fp32 = static_cast<double>(2 * s * d + c.heads * s);           // RMSNorm in float32
  if (c.sandwich_norms) block.saved_fp32 += static_cast<double>(2 * s * d);  // Gemma's two more
  // Recomputed, the two RMSNorms keep only their inputs (the fused attention frees nothing).
  block.part(module::RecomputeKind::kNorms) = {.fp32 = static_cast<double>(2 * s * d)};
  // Recomputing the fused attention frees only its statistics (not counted), and costs its
  // forward again (around the ring under context parallelism).
  block.part(module::RecomputeKind::kAttention) = {.flops = static_cast<double>(4 * s * s * q),
                                                   .ring = true};
  block.workspace = static_cast<double>(s * d);  // the stream's
  if (moe) {
    const int64_t shared = 3 * d * moe->shared_experts * ffn;
    block.parameters = 2 * d + head_norms + attention + moe->experts * (d + 3 * d * ffn) + shared;
    block.split_parameters = attention + shared;
    block.expert_parameters = moe->experts * 3 * d * ffn;
    block.largest_tensor = std::max(d * d, moe->experts * d * ffn);  // every expert's gate
    add_expert_costs(block, *moe, static_cast<double>(s), static_cast<double>(d),
                     static_cast<double>(ffn));
  } else {
    add_linear(block, s, d, 2 * ffn);
    add_linear(block, s, ffn, d);
    block.split_saved += static_cast<double>(4 * s * ffn);  // gate, up, silu(gate), product
    using module::RecomputeKind;
    block.part(RecomputeKind::kMlp) = {.split = static_cast<double>(4 * s * ffn),
                                       .flops = static_cast<double>(6 * s * d * ffn),
                                       .all_reduces = 1};
    block.part(RecomputeKind::kMlpActivation) = {.split = static_cast<double>(2 * s * ffn),
                                                 .flops = static_cast<double>(2 * s * d * ffn),
                                                 .all_reduces = 1};
    block.workspace += static_cast<double>(2 * s * ffn);  // gate's and up's gradients
  }
  block.ring_elements = static_cast<double>(2 * s * kv);  // keys and values
  block.width = static_cast<double>(d);
  block.output = static_cast<double>(s * d);
  block.all_reduced = block.output;
  block.forward_all_reduces = 2;
  block.backward_all_reduces = 2;
  return block;
}

}  // namespace

std::vector<LayerCost> llama_costs(const LlamaConfig& c, const MoeConfig* moe) {
  const int64_t d = c.d_model, s = c.context;
  std::vector<LayerCost> layers{
      embedding("LlamaEmbedding", c.vocab_size, 0, d, s, c.tie_embeddings)};
  const LayerCost dense = llama_block(c, nullptr);
  const LayerCost routed = moe ? llama_block(c, moe) : dense;
  for (int64_t i = 0; i < c.layers; ++i) layers.push_back(moe && moe->routes(i) ? routed : dense);
  layers.push_back(norm("RMSNorm", d, d, s));
  layers.push_back(head("LlamaHead", c.vocab_size, d, s, c.tie_embeddings, layers[0].parameters));
  return layers;
}

}  // namespace pipetrain::models::costs
