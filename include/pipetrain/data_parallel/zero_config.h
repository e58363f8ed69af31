#pragma once

#include <cstdint>

#include "pipetrain/config/key_table.h"

namespace pipetrain::data_parallel {

// DeepSpeed's ZeRO: the optimizer's state split over the data-parallel ranks.
struct ZeroConfig {
  // 0: every replica holds all of it; 1: fp32 masters and optimizer state sharded,
  // gradients reduce-scattered; 2: also the full gradients dropped once reduced; 3: also
  // the parameters sharded, each layer's gathered just before it runs (ShardedParameters).
  int64_t stage = 0;
  int64_t reduce_bucket_size = 500'000'000;     // elements per reduce-scatter (DeepSpeed's)
  int64_t allgather_bucket_size = 500'000'000;  // elements per all-gather of the shards
  // Stage 3: layers gathered ahead of the one computing, in forward and in backward.
  int64_t prefetch = 1;
  // Stage 3: a layer's parameters freed after its forward (gathered again for backward);
  // false: kept from their first gather to the end of the step.
  bool reshard_after_forward = true;
};

// DeepSpeed's `zero_optimization` keys, which the engine's table takes in
// (engine::training_keys).
const config::KeyTable<ZeroConfig>& zero_keys();

// Whether the experts' gradients are reduce-scattered onto shards over the ranks holding
// the same experts (`holders` of them) instead of all-reduced: under ZeRO (`sharded`) with
// more than one holder. The one rule GradientSync divides the experts' gradients by and
// the optimizer shards the experts' masters by (ZeRO 1 over the holders).
inline bool experts_reduce_scattered(bool sharded, int holders) {
  return sharded && holders > 1;
}

}  // namespace pipetrain::data_parallel
