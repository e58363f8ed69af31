#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// Feeds a stage its micro-batches: the stage holding the first virtual stage takes the
// inputs, the one holding the last the labels (in a V both are stage 0).
// Under tensor and context parallelism only the first rank of the group computing the
// samples (Grid::sample_comm: context x model) reads the source and broadcasts what it
// read to the group; the others learn from it when it had nothing, rather than wait.
// Micro-batches go to the stage's device (from pinned host memory, without waiting, to a
// GPU); floating inputs are cast to the model's dtype there.
class MicroBatchFeed {
 public:
  // Which ends of the model this rank holds.
  struct Ends {
    bool first = false;  // takes the inputs
    bool last = false;   // takes the labels
  };
  MicroBatchFeed(std::shared_ptr<const topology::Grid> grid, at::ScalarType dtype,
                 at::Device device, Ends ends);

  // Collective over the model-parallel group. `loaded` and `step` (micro-batches read so
  // far in this batch, the optimizer step) describe where the data ran out, if it did.
  MicroBatch next(MicroBatchSource* source, int loaded, int64_t step);
  const Ends& ends() const { return ends_; }

 private:
  MicroBatch read(MicroBatchSource* source, int loaded, int64_t step);

  std::shared_ptr<const topology::Grid> grid_;
  at::ScalarType dtype_;
  at::Device device_;
  Ends ends_;
};

}  // namespace pipetrain::engine
