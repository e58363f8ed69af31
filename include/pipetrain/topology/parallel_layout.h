#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/config/key_table.h"
#include "pipetrain/topology/process_topology.h"

namespace pipetrain::topology {

// Every parallel axis of a job as one value: made once from the config and the command
// line, checked once against the job's ranks (resolve_layout), and read by the grid, the
// job line and the planner (whose planner::Layout is one with a batch split and schedule).
struct ParallelLayout {
  // Sizes as the config holds them (64-bit, checked against the ranks before any is
  // narrowed); a resolved layout's fit in an int.
  int64_t pipe = 1;     // pipeline stages
  int64_t data = 1;     // data-parallel replicas (0 in a layout asked for: what the rest leave)
  int64_t tensor = 1;   // tensor-parallel (model_parallel) ranks
  int64_t context = 1;  // ranks splitting each sequence (ring attention)
  int64_t expert = 1;   // consecutive data-parallel ranks splitting each MoE layer's experts
  bool sequence_parallel = false;  // Megatron's, over the tensor-parallel ranks
  int64_t chunks = 1;              // model chunks (virtual stages) per pipeline stage

  int64_t ranks() const { return pipe * data * tensor * context; }
  // Ranks that compute one stage's samples together: its data, context and tensor ranks.
  int64_t ranks_per_stage() const { return tensor * context * data; }
};

// The layout of a job of `world_size` ranks: `asked` with its data size (0: whatever the
// other axes leave) resolved. InputError naming the axes and their keys when they do not
// divide the ranks, when a data size given disagrees, or when expert does not divide data.
ParallelLayout resolve_layout(ParallelLayout asked, int world_size);

// The axes' keys, bound onto the one ParallelLayout a job holds: pipeline.stages and
// pipeline.chunks, data_parallel, model_parallel, sequence_parallel, context_parallel,
// expert_parallel. Read into a layout whose data is 0 (what the ranks leave) unless given.
const config::KeyTable<ParallelLayout>& layout_keys();

// The ranks' named axes for any layout: pipe and data, then context and model where they
// are larger than 1 (model fastest, then context, as Megatron orders tp-cp-dp-pp);
// coordinates agree with DeepSpeed's topologies for the same axes.
ProcessTopology make_topology(const ParallelLayout& layout);

}  // namespace pipetrain::topology
