#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipetrain/comm/communicator.h"

namespace pipetrain::data_parallel {

// Parameters grouped into gradient buckets of at most `bucket_elements` each (a larger
// tensor alone), in the order backward finishes them: reverse parameter order, the `late`
// ones (whose gradients change after backward) after all others and never with them.
std::vector<std::vector<std::size_t>> backward_order_buckets(
    const std::vector<at::Tensor>& parameters, const std::vector<bool>& late,
    int64_t bucket_elements);

// One bucket per layer (ZeRO stage 3's unit of gathering), `layers` giving each
// parameter's layer: in backward order as above, a layer's `late` parameters in a bucket
// of their own after all others.
std::vector<std::vector<std::size_t>> layer_buckets(const std::vector<int>& layers,
                                                    const std::vector<bool>& late);

// How each gradient bucket is reduced over the data-parallel replicas: averaged into the
// model's gradients (AveragedBuckets), or reduce-scattered onto ZeRO's shards
// (ShardedMasters). GradientBuckets decides when.
class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  // Parameter indices per bucket, in the order the buckets are reduced.
  virtual const std::vector<std::vector<std::size_t>>& buckets() const = 0;
  // Starts reducing bucket k from its parameters' gradients as they are now.
  virtual comm::WorkPtr start(int k) = 0;
  // Bucket k's reduction has completed: its result goes where it belongs.
  virtual void complete(int k) = 0;
  // Bucket k's reduction was left unfinished (a step threw); it may still write into its
  // buffers, which are therefore not used again.
  virtual void abandon(int k) = 0;
};

}  // namespace pipetrain::data_parallel
