#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/engine/training_config.h"
#include "pipetrain/module/recompute.h"
#include "pipetrain/topology/parallel_layout.h"

namespace pipetrain::planner {

// One way to run a job: its parallel layout (the same type the job runs with), the batch
// split, the schedule, ZeRO and checkpointing.
struct Layout {
  topology::ParallelLayout parallel{};  // tensor within a node; expert: groups of the replicas
  int64_t micro_batch = 1;              // samples per micro-batch
  int64_t micro_batches = 1;  // per step: global batch = micro_batch · micro_batches · data
  schedule::Kind schedule = schedule::Kind::k1F1B;
  int zero = 0;
  bool checkpointing = false;  // every layer's activations recomputed in backward
  // Selective recompute, per stage (empty: none): what the planner chose to fit memory.
  std::vector<module::RecomputeSet> recompute{};

  module::RecomputeSet recompute_of(int stage) const {
    return recompute.empty() ? module::RecomputeSet{}
                             : recompute.at(static_cast<std::size_t>(stage));
  }
  bool recomputes() const {
    for (const auto& set : recompute)
      if (!set.empty()) return true;
    return false;
  }

  int64_t devices() const { return parallel.ranks(); }
  // Ranks that compute one stage's samples together: its data, context and tensor replicas.
  int64_t ranks_per_stage() const { return parallel.ranks_per_stage(); }
  int64_t global_batch() const { return micro_batch * micro_batches * parallel.data; }
  // The config's spelling of the schedule, with chunks: "1f1b", "interleaved x2", ...
  std::string schedule_label() const;
};

}  // namespace pipetrain::planner
