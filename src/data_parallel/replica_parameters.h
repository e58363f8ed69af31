#pragma once

#include <ATen/core/Tensor.h>

namespace pipetrain::data_parallel {

// Where ZeRO keeps a stage's parameters among its replicas, per bucket of a FlatShards
// layout: this rank owns one piece of each bucket, the piece its optimizer updates, and
// every replica gets the updated values from the owners. Stages 1 and 2 keep every
// parameter whole on every replica and gather the pieces after each step (FlatParameters);
// stage 3 keeps the pieces only and gathers a layer's when it runs (ShardedParameters).
class ReplicaParameters {
 public:
  virtual ~ReplicaParameters() = default;

  // This rank's piece of bucket k, in the parameters' dtype: what the optimizer's update
  // writes before gather_parameters().
  virtual at::Tensor piece(int k) const = 0;
  // Collective over the replicas, after every rank wrote its pieces: the parameters hold
  // the updated values (stages 1 and 2: gathered now; stage 3: the gathered copies
  // released, each gathered anew when its layer next runs).
  virtual void gather_parameters() = 0;
  // Between steps, whether every parameter is whole on this rank (below stage 3).
  virtual bool whole() const = 0;
};

}  // namespace pipetrain::data_parallel
