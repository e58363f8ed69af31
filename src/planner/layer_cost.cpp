#include "pipetrain/planner/layer_cost.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

#include "pipetrain/io/errors.h"

namespace pipetrain::planner {
namespace {

// A [s, in] x [in, out] matrix product: forward, input gradient and weight gradient each
// take 2·s·in·out FLOPs.
void add_linear(LayerCost& layer, double s, double in, double out) {
  layer.forward_flops += 2 * s * in * out;
  layer.backward_input_flops += 2 * s * in * out;
  layer.backward_weight_flops += 2 * s * in * out;
}

// Attention over s positions with width d (all heads): scores and weighted values take
// 2·s²·d FLOPs each forward, twice that backward, all of it input gradients. Counted for
// the whole square, as Megatron-LM counts it (a causal kernel may skip the upper half).
void add_attention(LayerCost& layer, double s, double d) {
  layer.forward_flops += 4 * s * s * d;
  layer.backward_input_flops += 8 * s * s * d;
}

// The token embedding (vocabulary split over the group, as VocabParallelEmbedding does),
// plus positions when the model learns them. A lookup: no FLOPs worth counting.
LayerCost embedding(const std::string& type, int64_t vocab, int64_t positions, int64_t d, int64_t s,
                    bool tied) {
  LayerCost layer;
  layer.type = type;
  if (tied) layer.tie_key = "embed";
  layer.parameters = (vocab + positions) * d;
  layer.split_parameters = vocab * d;
  layer.largest_tensor = vocab * d;
  layer.output = static_cast<double>(s * d);
  layer.traffic = static_cast<double>(4 * s * d);  // the lookup's rows, the positions' add
  layer.width = static_cast<double>(d);
  layer.all_reduced = static_cast<double>(s * d);
  layer.dense_gradient = true;    // the lookup's backward scatters into a whole table
  layer.forward_all_reduces = 1;  // the vocabulary-parallel lookup's partial sums
  return layer;
}

// The LM head: logits over the vocabulary split over the group, and the cross-entropy on
// them, which keeps the logits' float32 softmax for backward.
LayerCost head(const std::string& type, int64_t vocab, int64_t d, int64_t s, bool tied,
               int64_t tied_parameters) {
  LayerCost layer;
  layer.type = type;
  if (tied) layer.tie_key = "embed";
  layer.parameters = tied ? tied_parameters : vocab * d;
  layer.split_parameters = vocab * d;
  layer.largest_tensor = vocab * d;
  add_linear(layer, s, d, vocab);
  layer.width = static_cast<double>(d);
  layer.saved = static_cast<double>(s * d);
  layer.split_saved = static_cast<double>(s * vocab);    // the log-softmax
  layer.workspace = static_cast<double>(2 * s * vocab);  // its gradient and the logits'
  layer.float32_loss = true;
  layer.split_traffic = static_cast<double>(6 * s * vocab);  // cast, log-softmax (float32)

  layer.output = 1;                // the loss
  layer.backward_all_reduces = 1;  // the column-parallel input gradient
  return layer;
}

LayerCost norm(const std::string& type, int64_t parameters, int64_t d, int64_t s) {
  LayerCost layer;
  layer.type = type;
  layer.parameters = parameters;
  layer.saved = static_cast<double>(s * d);
  layer.saved_fp32 = static_cast<double>(2 * s);
  layer.traffic = static_cast<double>(2 * s * d);
  layer.width = static_cast<double>(d);
  layer.workspace = static_cast<double>(2 * s * d);
  layer.output = static_cast<double>(s * d);
  return layer;
}

std::vector<LayerCost> gpt_costs(const models::GptConfig& c) {
  const int64_t d = c.d_model, s = c.context;
  std::vector<LayerCost> layers{
      embedding("GptEmbedding", c.vocab_size, c.context, d, s, c.tie_embeddings)};
  LayerCost block;
  block.type = "GptBlock";
  block.parameters = 12 * d * d + 13 * d;       // see gpt_layers()
  block.split_parameters = 12 * d * d + 7 * d;  // column-parallel weights and biases
  block.largest_tensor = 4 * d * d;             // either MLP matrix
  add_linear(block, s, d, 3 * d);
  add_attention(block, s, d);
  add_linear(block, s, d, d);
  add_linear(block, s, d, 4 * d);
  add_linear(block, s, 4 * d, d);
  // Kept for backward: the block's input, both norms' outputs and the residual between
  // them (replicated); q/k/v, the attention output and its merged copy, the MLP's two
  // 4·d activations (split by heads and features).
  block.saved = static_cast<double>(4 * s * d);
  block.split_saved = static_cast<double>(13 * s * d);
  block.saved_fp32 = static_cast<double>(4 * s + c.heads * s);  // norm statistics, logsumexp
  using module::RecomputeKind;
  // Both MLP parts end in the row-parallel projection: its all-reduce comes again.
  block.part(RecomputeKind::kMlp) = {.split = static_cast<double>(8 * s * d),
                                     .flops = static_cast<double>(16 * s * d * d),
                                     .all_reduces = 1};
  block.part(RecomputeKind::kMlpActivation) = {.split = static_cast<double>(4 * s * d),
                                               .flops = static_cast<double>(8 * s * d * d),
                                               .all_reduces = 1};
  // The fused LayerNorm keeps its statistics only: recomputing the norms frees nothing, nor
  // does recomputing the fused attention (its inputs and output stay), which still costs
  // its forward again (around the ring under context parallelism).
  block.part(RecomputeKind::kAttention) = {.flops = static_cast<double>(4 * s * s * d),
                                           .ring = true};
  if (c.dropout > 0) {  // attention weights computed unfused, with their masks
    block.split_saved += static_cast<double>(3 * c.heads * s * s + 2 * s * d);
    block.part(RecomputeKind::kAttention).split =
        static_cast<double>(3 * c.heads * s * s + 2 * s * d);
    // Its backward holds one tensor of the weights' size beyond those it frees as it goes
    // (measured: bench/long_context_bench.sh with gpt-dropout). Ring attention keeps the
    // mask's rows only, recomputing each block's weights in backward (four block-sized
    // tensors at a time: weights, their gradient, the dropped weights, the mask's block);
    // each context rank draws the whole mask in float first.
    const auto square = static_cast<double>(c.heads * s * s);
    block.unfused_workspace = square;
    block.ring_saved_less = 2 * square;
    block.ring_workspace = 4 * square;
    block.drawn_whole = square;
  }
  block.workspace = static_cast<double>(5 * s * d);      // the MLP's gradients and the stream's
  block.ring_elements = static_cast<double>(2 * s * d);  // keys and values
  // Two norms and two residual adds on the stream; q/k/v read and the output written by
  // the fused attention, the heads merged; GELU over the 4·d features.
  block.traffic = static_cast<double>(10 * s * d);
  block.split_traffic = static_cast<double>(14 * s * d);
  if (c.dropout > 0) {
    // Unfused attention's elementwise work over the [heads, s, s] square: the scores
    // written, scaled, masked and softmaxed (each a read and a write), the dropout mask
    // drawn, applied and rescaled; and the two dropouts on the stream (input read, mask
    // drawn and applied, output written).
    block.split_traffic += static_cast<double>(14 * c.heads * s * s);
    block.traffic += static_cast<double>(8 * s * d);
  }
  block.width = static_cast<double>(d);
  block.output = static_cast<double>(s * d);
  block.all_reduced = block.output;
  block.forward_all_reduces = 2;   // after attention, after the MLP
  block.backward_all_reduces = 2;  // into the two column-parallel inputs
  for (int64_t i = 0; i < c.layers; ++i) layers.push_back(block);
  layers.push_back(norm("LayerNorm", 2 * d, d, s));
  layers.push_back(head("GptHead", c.vocab_size, d, s, c.tie_embeddings, layers[0].parameters));
  return layers;
}

// A mixture of experts over s tokens, each computed by k of the experts: the router's
// logits, the chosen experts' SwiGLU MLPs (gathered by expert, weighted and summed back)
// and the shared experts'. The router and the routed experts are replicated over a
// tensor-parallel group; the shared experts split over it.
void add_experts(LayerCost& block, const models::MoeConfig& m, double s, double d, double ffn) {
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
LayerCost llama_block(const models::LlamaConfig& c, const models::MoeConfig* moe) {
  const int64_t d = c.d_model, s = c.context;
  const int64_t ffn =
      moe && moe->moe_intermediate_size > 0 ? moe->moe_intermediate_size : c.intermediate_size;
  const int64_t hd = c.head_width(), q = c.heads * hd;  // the query width (d unless head_dim)
  const int64_t kv = hd * c.num_key_value_heads;        // key (and value) width
  LayerCost block;
  block.type = moe ? "MixtralBlock" : "LlamaBlock";
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
    add_experts(block, *moe, static_cast<double>(s), static_cast<double>(d),
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

std::vector<LayerCost> llama_costs(const models::LlamaConfig& c,
                                   const models::MoeConfig* moe = nullptr) {
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

// The costs of registered families, by model.type (register_family_costs).
std::map<std::string, FamilyCosts>& registered_costs() {
  static std::map<std::string, FamilyCosts> costs;
  return costs;
}

}  // namespace

double LayerCost::parameters_per_rank(int t, int e) const {
  return static_cast<double>(parameters - split_parameters - expert_parameters) +
         static_cast<double>(split_parameters) / t + static_cast<double>(expert_parameters) / e;
}

double LayerCost::saved_bytes(int t, int element_bytes, bool sequence_parallel, bool ring) const {
  const int split_bytes = float32_loss ? 4 : element_bytes;
  const double replicated = sequence_parallel ? 1.0 / t : 1.0;
  const double split = split_saved - (ring ? ring_saved_less : 0.0);
  return (saved * element_bytes + saved_fp32 * 4) * replicated + split / t * split_bytes;
}

std::vector<const LayerCost::Recomputable*> LayerCost::recomputed_parts(
    module::RecomputeSet kinds) const {
  std::vector<const Recomputable*> parts;
  for (const auto& [name, kind] : module::recompute_kinds()) {
    if (!kinds.contains(kind)) continue;
    if (kind == module::RecomputeKind::kMlpActivation &&
        kinds.contains(module::RecomputeKind::kMlp))
      continue;  // within the MLP's
    parts.push_back(&recomputable[static_cast<std::size_t>(kind)]);
  }
  return parts;
}

double LayerCost::recompute_freed_bytes(module::RecomputeSet kinds, int t, int element_bytes,
                                        bool sequence_parallel, bool ring) const {
  const Recomputable* attention =
      &recomputable[static_cast<std::size_t>(module::RecomputeKind::kAttention)];
  double freed = 0;
  for (const Recomputable* part : recomputed_parts(kinds)) {
    // Ring attention keeps less of the unfused attention already (ring_saved_less).
    const bool ring_part = ring && part == attention;
    const double split = std::max(0.0, part->split - (ring_part ? ring_saved_less : 0.0));
    freed += split / t * element_bytes + part->fp32 * 4 * (sequence_parallel ? 1.0 / t : 1.0);
  }
  return std::min(freed, saved_bytes(t, element_bytes, sequence_parallel, ring));
}

LayerCost::Recomputable LayerCost::recompute_work(module::RecomputeSet kinds) const {
  Recomputable work;
  for (const Recomputable* part : recomputed_parts(kinds)) {
    work.flops += part->flops;
    work.all_reduces += part->all_reduces;
    work.ring = work.ring || part->ring;
  }
  return work;
}

double LayerCost::traffic_bytes(int t, int element_bytes, bool sequence_parallel) const {
  const double replicated = sequence_parallel ? 1.0 / t : 1.0;
  return (traffic * replicated + split_traffic / t) * (float32_loss ? 4 : element_bytes);
}

double LayerCost::loss_bytes(int t) const {
  return float32_loss ? split_saved / t * 4 : 0.0;
}

double LayerCost::workspace_bytes(int t, int element_bytes, double batch, int context) const {
  const double attention = context > 1 ? ring_workspace / context : unfused_workspace;
  return batch * (workspace + attention) / t * (float32_loss ? 4 : element_bytes) +
         (dense_gradient ? parameters_per_rank(t) * element_bytes : 0.0);
}

void add_adapters(std::vector<LayerCost>& layers, const models::ModelConfig& config,
                  const module::LoraConfig& lora) {
  if (!lora.enabled()) return;
  const bool decoder = config.type != models::Family::kGpt && config.type != models::Family::kMlp &&
                       config.type != models::Family::kRegistered;
  int64_t block = 0;
  for (LayerCost& layer : layers) {
    layer.frozen = true;
    const bool dense = layer.type == "LlamaBlock";
    if (!decoder || (!dense && layer.type != "MixtralBlock")) continue;
    if (!lora.adapts_block(block++)) continue;
    const models::LlamaConfig c = models::decoder_config(config);
    const int64_t d = c.d_model, q = c.heads * c.head_width(),
                  kv = c.num_key_value_heads * c.head_width(), ffn = c.intermediate_size;
    // Each adapted linear's A [rank, in] and B [out, rank]; a mixture's experts are not.
    struct Linear {
      const char* name;
      int64_t in_and_out;
      bool mlp;
    };
    for (const Linear& linear :
         {Linear{"q_proj", d + q, false}, Linear{"k_proj", d + kv, false},
          Linear{"v_proj", d + kv, false}, Linear{"o_proj", q + d, false},
          Linear{"gate_proj", d + ffn, true}, Linear{"up_proj", d + ffn, true},
          Linear{"down_proj", ffn + d, true}}) {
      if (lora.targets(linear.name) && (dense || !linear.mlp))
        layer.adapter_parameters += lora.rank * linear.in_and_out;
    }
  }
}

std::vector<LayerCost> layer_costs(const models::ModelConfig& config) {
  switch (config.type) {
    case models::Family::kGpt:
      return gpt_costs(config.gpt);
    case models::Family::kLlama:
    case models::Family::kQwen2:
    case models::Family::kQwen3:
    case models::Family::kMistral:
    case models::Family::kGemma3:
      return llama_costs(models::decoder_config(config));
    case models::Family::kMixtral:
    case models::Family::kQwen3Moe:
      return llama_costs(models::decoder_config(config), &config.moe);
    case models::Family::kRegistered:
      if (const auto costs = registered_costs().find(config.registered);
          costs != registered_costs().end())
        return costs->second(config.params);
      throw io::InputError("plan: model.type \"" + config.registered +
                           "\" has no layer costs (planner::register_family_costs)");
    case models::Family::kMlp:
      break;
  }
  throw io::InputError("plan: model.type \"" + models::type_name(config) +
                       "\" cannot be costed; the planner knows \"gpt\", the LLaMA "
                       "families and registered families given costs");
}

void register_family_costs(const std::string& family, FamilyCosts costs) {
  for (const auto& [builtin, known] : models::family_names()) {
    if (builtin == family)
      throw std::logic_error("register_family_costs: \"" + family + "\" is built in");
  }
  if (!costs) throw std::logic_error("register_family_costs: no costs for \"" + family + "\"");
  if (!registered_costs().emplace(family, std::move(costs)).second)
    throw std::logic_error("register_family_costs: \"" + family + "\" has costs already");
}

}  // namespace pipetrain::planner
