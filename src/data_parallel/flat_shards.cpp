#include "data_parallel/flat_shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pipetrain::data_parallel {
namespace {

std::vector<std::vector<std::size_t>> one_bucket(std::size_t tensors) {
  std::vector<std::size_t> all(tensors);
  std::iota(all.begin(), all.end(), 0);
  return {all};
}

}  // namespace

std::vector<int64_t> packed_strides(at::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  return strides;
}

FlatShards::FlatShards(const std::vector<int64_t>& elements, int shards)
    : FlatShards(elements, one_bucket(elements.size()), shards) {}

FlatShards::FlatShards(const std::vector<int64_t>& elements,
                       const std::vector<std::vector<std::size_t>>& buckets, int shards)
    : offsets_(elements.size(), -1), bucket_of_(elements.size(), -1), shards_(shards) {
  if (shards < 1) throw std::invalid_argument("FlatShards needs at least one shard");
  bucket_begin_.push_back(0);
  for (const auto& bucket : buckets) {
    int64_t end = bucket_begin_.back();
    for (std::size_t i : bucket) {
      if (i >= elements.size() || offsets_[i] >= 0)
        throw std::invalid_argument("FlatShards: each tensor in one bucket, once");
      offsets_[i] = end;
      bucket_of_[i] = static_cast<int>(bucket_begin_.size()) - 1;
      by_offset_.push_back(i);
      end += elements[i];
    }
    const int64_t size = end - bucket_begin_.back();
    shard_begin_.push_back(shard_size_);
    shard_size_ += (size + shards - 1) / shards;
    bucket_begin_.push_back(bucket_begin_.back() + (size + shards - 1) / shards * shards);
  }
  if (by_offset_.size() != elements.size())
    throw std::invalid_argument("FlatShards: each tensor in one bucket, once");
}

FlatShards::Piece FlatShards::piece(int rank, int k) const {
  const int64_t size = bucket_size(k) / shards_;
  return {bucket_begin_[k] + rank * size, shard_begin_[k], size};
}

void FlatShards::read(const std::vector<at::Tensor>& tensors, int64_t begin, at::Tensor out) const {
  const int64_t end = begin + out.numel();
  if (tensors.size() != offsets_.size() || begin < 0 || end > padded_size())
    throw std::invalid_argument("FlatShards::read outside the layout");
  // The first tensor (in flat order) that ends after `begin`.
  auto ends_after = [&](std::size_t i) { return offsets_[i] + tensors[i].numel() > begin; };
  auto it = std::partition_point(by_offset_.begin(), by_offset_.end(),
                                 [&](std::size_t i) { return !ends_after(i); });
  int64_t filled = begin;  // out is written up to here
  for (; it != by_offset_.end() && offsets_[*it] < end; ++it) {
    const std::size_t i = *it;
    const int64_t from = std::max(begin, offsets_[i]);
    const int64_t to = std::min(end, offsets_[i] + tensors[i].numel());
    if (from > filled) out.narrow(0, filled - begin, from - filled).zero_();
    out.narrow(0, from - begin, to - from)
        .copy_(tensors[i].reshape({-1}).narrow(0, from - offsets_[i], to - from));
    filled = to;
  }
  if (filled < end) out.narrow(0, filled - begin, end - filled).zero_();
}

void FlatShards::read_shard(const std::vector<at::Tensor>& tensors, int rank,
                            at::Tensor out) const {
  for (int k = 0; k < buckets(); ++k) {
    const Piece p = piece(rank, k);
    read(tensors, p.flat_begin, out.narrow(0, p.shard_begin, p.size));
  }
}

at::Tensor FlatShards::join(const at::Tensor& shards) const {
  at::Tensor flat = at::empty({padded_size()}, shards.options());
  for (int r = 0; r < shards_; ++r) {
    for (int k = 0; k < buckets(); ++k) {
      const Piece p = piece(r, k);
      flat.narrow(0, p.flat_begin, p.size).copy_(shards[r].narrow(0, p.shard_begin, p.size));
    }
  }
  return flat;
}

at::Tensor FlatShards::shard_of(const at::Tensor& flat, int rank) const {
  if (buckets() == 0) return flat.narrow(0, 0, 0);
  if (buckets() == 1) return flat.narrow(0, piece(rank, 0).flat_begin, shard_size_);
  std::vector<at::Tensor> pieces;
  for (int k = 0; k < buckets(); ++k) {
    const Piece p = piece(rank, k);
    pieces.push_back(flat.narrow(0, p.flat_begin, p.size));
  }
  return at::cat(pieces);
}

}  // namespace pipetrain::data_parallel
