#include "pipetrain/models/layer_cost.h"

#include <algorithm>

#include "models/layer_cost_parts.h"

namespace pipetrain::models {
namespace costs {

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

}  // namespace costs

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

}  // namespace pipetrain::models
