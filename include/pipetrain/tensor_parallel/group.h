#pragma once

#include <memory>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::tensor_parallel {

// The ranks that split each layer's tensors between them (Megatron's tensor-model-parallel
// group; the grid's "model" axis). Without a communicator there is one rank and every
// collective is the identity, so the same layers serve plain and tensor-parallel models.
struct Group {
  std::shared_ptr<comm::Communicator> comm;
  // Megatron's sequence parallelism: outside the parallel linears each rank holds its
  // 1/size slice of the sequence (dimension 1 of [batch, seq, ...] activations) instead of
  // the whole, replicated (sequence_parallel.h).
  bool sequence_parallel = false;

  int rank() const { return comm ? comm->rank() : 0; }
  int size() const { return comm ? comm->size() : 1; }
  bool parallel() const { return size() > 1; }
};

}  // namespace pipetrain::tensor_parallel
