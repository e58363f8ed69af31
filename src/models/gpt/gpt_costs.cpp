#include "models/layer_cost_parts.h"

namespace pipetrain::models::costs {

std::vector<LayerCost> gpt_costs(const GptConfig& c) {
  const int64_t d = c.d_model, s = c.context;
  std::vector<LayerCost> layers{
      embedding("GptEmbedding", c.vocab_size, c.context, d, s, c.tie_embeddings)};
  LayerCost block;
  block.type = "GptBlock";
  block.block = true;
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

}  // namespace pipetrain::models::costs
