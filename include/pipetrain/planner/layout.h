#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/engine/training_config.h"

namespace pipetrain::planner {

// One way to run a job: the grid, the batch split, the schedule, ZeRO and checkpointing.
struct Layout {
  int tensor = 1;  // model-parallel size t (within a node)
  int pipe = 1;
  int data = 1;
  int64_t micro_batch = 1;    // samples per micro-batch
  int64_t micro_batches = 1;  // per step: global batch = micro_batch · micro_batches · data
  schedule::Kind schedule = schedule::Kind::k1F1B;
  int chunks = 1;  // model chunks per stage (interleaved)
  int zero = 0;
  bool checkpointing = false;      // every layer's activations recomputed in backward
  int context = 1;                 // context-parallel size c: each sequence over c ranks
  bool sequence_parallel = false;  // Megatron's, over the t ranks (t > 1)
  int experts = 1;                 // expert-parallel size e: groups of e of the d replicas

  int64_t devices() const { return static_cast<int64_t>(tensor) * context * pipe * data; }
  // Ranks that compute one stage's samples together: its data, context and tensor replicas.
  int64_t ranks_per_stage() const { return static_cast<int64_t>(tensor) * context * data; }
  int64_t global_batch() const { return micro_batch * micro_batches * data; }
  // The config's spelling of the schedule, with chunks: "1f1b", "interleaved x2", ...
  std::string schedule_label() const;
};

}  // namespace pipetrain::planner
