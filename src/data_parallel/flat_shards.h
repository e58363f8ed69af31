#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipetrain::data_parallel {

// The strides of a contiguous tensor of `sizes` (what a parameter seated in a flat buffer
// gets).
std::vector<int64_t> packed_strides(at::IntArrayRef sizes);

// ZeRO's layout: tensors laid out one after another in buckets, each bucket padded with
// zeros to a multiple of `shards` and cut into `shards` equal pieces; rank r owns piece r
// of every bucket, and its shard is those pieces one after another. A bucket can be
// reduce-scattered on its own as soon as its gradients are final. With one bucket of every
// tensor in order, shard r is simply flat elements [r * shard_size, (r + 1) * shard_size).
class FlatShards {
 public:
  // `buckets`: the tensor indices of each bucket, in flat order (every tensor once);
  // `elements`: each tensor's element count.
  FlatShards(const std::vector<int64_t>& elements,
             const std::vector<std::vector<std::size_t>>& buckets, int shards);
  // One bucket of every tensor in order.
  FlatShards(const std::vector<int64_t>& elements, int shards);

  int shards() const { return shards_; }
  int buckets() const { return static_cast<int>(bucket_begin_.size()) - 1; }
  int64_t shard_size() const { return shard_size_; }
  int64_t padded_size() const { return bucket_begin_.back(); }
  // Where tensor i begins in the flat vector, and its bucket.
  int64_t offset(std::size_t i) const { return offsets_[i]; }
  int bucket_of(std::size_t i) const { return bucket_of_[i]; }
  // Bucket k: flat elements [begin, begin + size), a multiple of shards() long.
  int64_t bucket_begin(int k) const { return bucket_begin_[k]; }
  int64_t bucket_size(int k) const { return bucket_begin_[k + 1] - bucket_begin_[k]; }

  // Rank `rank`'s piece of bucket k: where it lies in the flat vector and in the shard.
  struct Piece {
    int64_t flat_begin = 0;
    int64_t shard_begin = 0;
    int64_t size = 0;
  };
  Piece piece(int rank, int k) const;

  // Fills `out` with flat elements [begin, begin + out.numel()) of `tensors` (one per
  // element count, any shapes, contiguous or not); padding reads as zero.
  void read(const std::vector<at::Tensor>& tensors, int64_t begin, at::Tensor out) const;
  // Fills `out` (shard_size() elements) with rank `rank`'s shard of `tensors`.
  void read_shard(const std::vector<at::Tensor>& tensors, int rank, at::Tensor out) const;
  // The flat vector (padded_size() elements) from every rank's shard (`shards`: shards() x
  // shard_size(), as an all-gather returns them).
  at::Tensor join(const at::Tensor& shards) const;
  // Rank `rank`'s shard of a flat vector `flat` (a copy unless it is one piece).
  at::Tensor shard_of(const at::Tensor& flat, int rank) const;

 private:
  std::vector<int64_t> offsets_;        // per tensor
  std::vector<int> bucket_of_;          // per tensor
  std::vector<std::size_t> by_offset_;  // tensor indices in flat order
  std::vector<int64_t> bucket_begin_;   // per bucket, then the padded total
  std::vector<int64_t> shard_begin_;    // per bucket: where its pieces begin in a shard
  int shards_;
  int64_t shard_size_ = 0;
};

}  // namespace pipetrain::data_parallel
