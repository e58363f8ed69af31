#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace pipetrain::tensor_parallel {

// The group a parameter is split over: the tensor-parallel (model) group, or the
// expert-parallel group (an MoE layer's experts, replicated over the model group).
enum class ShardGroup { kModel, kExperts };

// How a parameter is split over a group: along `dim`, into `stride` interleaved blocks
// that are each split evenly (a fused q/k/v weight has stride 3, so every rank holds the
// q, k and v rows of its own heads). Stride 1 is a plain even split.
struct ShardLayout {
  int64_t dim = 0;
  int64_t stride = 1;
  ShardGroup group = ShardGroup::kModel;
};

// Rank `rank`'s shard of `full` among `size` ranks: a contiguous copy, or `full` itself
// (made contiguous) when `size` is 1. Throws
// std::invalid_argument when the dimension does not split evenly.
at::Tensor take_shard(const at::Tensor& full, ShardLayout layout, int rank, int size);

// The full tensor from every rank's shard, stacked along a new first dimension in rank
// order (what Communicator::all_gather returns): the inverse of take_shard. Throws
// std::invalid_argument when the shards do not split into `stride` blocks.
at::Tensor join_shards(const at::Tensor& stacked, ShardLayout layout);

// The full shape of a tensor whose shard has `shard_shape`.
std::vector<int64_t> full_shape(at::IntArrayRef shard_shape, ShardLayout layout, int size);

// Implemented by modules whose parameters are shards: each sharded parameter's name
// (relative to the module) and layout. Parameters not listed are replicated.
class ShardedModule {
 public:
  virtual ~ShardedModule() = default;
  virtual std::vector<std::pair<std::string, ShardLayout>> shard_layouts() const = 0;
};

}  // namespace pipetrain::tensor_parallel
