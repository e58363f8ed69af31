#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/module/recompute.h"

namespace pipetrain::models {

// What one layer of a model costs for one sample (a sequence of `context` tokens), counted
// from its sizes the way its module computes: the planner's unit of work. Each family's row
// gives its layers' (FamilyRow::costs); the built-in bodies count theirs in
// src/models/<body>/*_costs.cpp.
// Tensor parallelism divides the `split_` parts by the model-parallel size t.
struct LayerCost {
  std::string type;        // the LayerSpec's type, e.g. "GptBlock"
  std::string tie_key{};   // tied layers hold one copy per stage
  bool block = false;      // a transformer block (the layers LoRA and check_adapted count)
  int64_t parameters = 0;  // as the partitioner counts them
  int64_t split_parameters = 0;
  // Elements of its largest parameter tensor, split over the tensor-parallel group (every
  // built-in layer splits it): a step without fused kernels keeps temporaries of its size.
  int64_t largest_tensor = 0;

  // Multiply-adds count two FLOPs. Backward is split as zero-bubble schedules split it:
  // gradients of the inputs, then of the weights.
  double forward_flops = 0;
  double backward_input_flops = 0;
  double backward_weight_flops = 0;

  // Elements the forward's other operations (norms, activations, residual adds, copies,
  // softmax) read and write, per sample: memory-bound work the FLOPs do not show. The
  // backward moves twice as much. `split_traffic` is the part tensor parallelism divides.
  double traffic = 0;
  double split_traffic = 0;

  // Activations kept from forward until backward, in elements of the compute type.
  double saved = 0;
  double split_saved = 0;  // the part tensor parallelism divides (per-head, per-feature)
  double saved_fp32 = 0;   // kept in float32 whatever the compute type (norm statistics, ...)
  // Attention computed in plain operators (the GPT's attention dropout), per sample, split
  // by t. Without context parallelism: the temporaries of its backward beyond `workspace`
  // (sequence-square gradients). Under it (ring attention): how much less of split_saved it
  // keeps (the mask's rows of this rank's queries instead of the whole weights), its
  // temporaries at c = 1 (a block of c ranks' takes 1/c² of them), and the elements each
  // rank draws whole, in float32 and for every head, for a moment in forward (the mask).
  double unfused_workspace = 0;
  double ring_saved_less = 0;
  double ring_workspace = 0;
  double drawn_whole = 0;
  // Activation gradients in flight during its backward, per sample, in elements of the
  // compute type (split by t); with `dense_gradient`, its weight gradient is also built
  // whole before it is added to the parameter's (an embedding's table).
  double workspace = 0;
  bool dense_gradient = false;
  // Its split activations and workspace are float32 whatever the compute type (the LM
  // head: the engine computes the loss in float32).
  bool float32_loss = false;
  // The width of its matrix products before tensor parallelism (d_model).
  double width = 0;
  // Elements handed to the next layer: a stage boundary's message, and a checkpoint.
  double output = 0;
  // Keys and values per sample (attention layers; 0 elsewhere), in elements of the compute
  // type, split over t: what context parallelism passes around its ring.
  double ring_elements = 0;
  // All-reduces over the model-parallel group per pass (t > 1), of `all_reduced` elements.
  int forward_all_reduces = 0;
  int backward_all_reduces = 0;
  double all_reduced = 0;

  // Of the FLOPs above, those every tensor-parallel rank computes whole (an MoE layer's
  // router and routed experts, replicated over the group); the rest split over it.
  double replicated_forward_flops = 0;
  double replicated_backward_input_flops = 0;
  double replicated_backward_weight_flops = 0;

  // An MoE layer's routed experts: their weights (replicated over a tensor-parallel group,
  // split over an expert-parallel one), and the elements each sample sends to them per
  // pass, k choices of d_model each (and as many back), which expert parallelism
  // exchanges by all-to-all.
  int64_t expert_parameters = 0;
  double dispatched = 0;

  // Under LoRA every parameter is frozen and only the adapters train: gradients, masters,
  // optimizer state and their reductions are the adapters' alone.
  bool frozen = false;
  int64_t adapter_parameters = 0;
  // The parameters one rank trains, of which routed experts' (see parameters_per_rank).
  double trained_per_rank(int t, int e = 1) const {
    return frozen ? static_cast<double>(adapter_parameters) / t : parameters_per_rank(t, e);
  }
  double trained_experts_per_rank(int e) const {
    return frozen ? 0.0 : static_cast<double>(expert_parameters) / e;
  }

  // Selective recompute, per module::RecomputeKind (by its value): the elements per sample
  // recomputing that part frees (`split`: split over t, in the compute type; `fp32`:
  // replicated, float32), and what backward repeats for it: its forward FLOPs, its
  // tensor-parallel all-reduces (of `all_reduced` elements; under sequence parallelism the
  // gather and reduce-scatter that replace one), and with `ring` the context-parallel ring's
  // forward passes. The MLP's activation is part of the MLP: recomputing both frees and
  // costs the MLP's.
  struct Recomputable {
    double split = 0;
    double fp32 = 0;
    double flops = 0;
    int all_reduces = 0;
    bool ring = false;
  };
  std::array<Recomputable, 5> recomputable{};
  Recomputable& part(module::RecomputeKind kind) {
    return recomputable[static_cast<std::size_t>(kind)];
  }
  // The parts `kinds` recomputes, each once (the MLP's activation inside the MLP's).
  std::vector<const Recomputable*> recomputed_parts(module::RecomputeSet kinds) const;
  // Of saved_bytes, what recomputing `kinds` frees; and the FLOPs it adds to backward.
  double recompute_freed_bytes(module::RecomputeSet kinds, int t, int element_bytes,
                               bool sequence_parallel = false, bool ring = false) const;
  // What backward repeats for `kinds`, summed over its parts (flops, all_reduces, ring; the
  // freed elements left 0).
  Recomputable recompute_work(module::RecomputeSet kinds) const;

  double backward_flops() const { return backward_input_flops + backward_weight_flops; }
  // One tensor-parallel rank's share of `flops`, of which `replicated` are computed whole.
  static double flops_per_rank(double flops, double replicated, int t) {
    return (flops - replicated) / t + replicated;
  }
  // Parameters held by one rank of a model-parallel group of size t and an expert-parallel
  // group of size e.
  double parameters_per_rank(int t, int e = 1) const;
  // Bytes of saved activations per sample on one rank of a group of size t; with
  // `sequence_parallel` the replicated part is split over the t ranks too.
  // `ring`: under context parallelism (ring_saved_less applies).
  double saved_bytes(int t, int element_bytes, bool sequence_parallel = false,
                     bool ring = false) const;
  // The part of saved_bytes the loss keeps outside the layer (checkpointing keeps it too).
  double loss_bytes(int t) const;
  // Bytes its forward's memory-bound operations move per sample on one rank of t.
  double traffic_bytes(int t, int element_bytes, bool sequence_parallel = false) const;
  // Bytes its backward needs beyond the saved activations, for `batch` samples (of the
  // sequences a context-parallel rank holds 1/context of).
  double workspace_bytes(int t, int element_bytes, double batch, int context = 1) const;
};

}  // namespace pipetrain::models
