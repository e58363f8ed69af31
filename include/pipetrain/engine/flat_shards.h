#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace pipetrain::engine {

// ZeRO's layout: a list of tensors read one after another as a single flat vector, padded
// with zeros to `shards` equal parts; shard r is elements [r * shard_size, (r + 1) *
// shard_size). A tensor may lie across several shards.
class FlatShards {
 public:
  // `elements`: each tensor's element count, in order.
  FlatShards(const std::vector<int64_t>& elements, int shards);

  int shards() const { return shards_; }
  int64_t shard_size() const { return shard_size_; }
  int64_t padded_size() const { return shard_size_ * shards_; }
  // Where tensor i begins.
  int64_t offset(std::size_t i) const { return offsets_[i]; }

  // Fills `out` with flat elements [begin, begin + out.numel()) of `tensors` (one per
  // element count, any shapes, contiguous or not); padding reads as zero.
  void read(const std::vector<at::Tensor>& tensors, int64_t begin, at::Tensor out) const;

 private:
  std::vector<int64_t> offsets_;  // one per tensor, then the unpadded total
  int shards_;
  int64_t shard_size_;
};

}  // namespace pipetrain::engine
