#include "pipetrain/engine/flat_shards.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace pipetrain::engine {

FlatShards::FlatShards(const std::vector<int64_t>& elements, int shards) : shards_(shards) {
  if (shards < 1) throw std::invalid_argument("FlatShards needs at least one shard");
  offsets_.push_back(0);
  for (const int64_t n : elements) offsets_.push_back(offsets_.back() + n);
  shard_size_ = (offsets_.back() + shards - 1) / shards;
}

void FlatShards::read(const std::vector<at::Tensor>& tensors, int64_t begin, at::Tensor out) const {
  const int64_t end = begin + out.numel();
  if (tensors.size() + 1 != offsets_.size() || begin < 0 || end > padded_size())
    throw std::invalid_argument("FlatShards::read outside the layout");
  // The first tensor that ends after `begin`.
  std::size_t i =
      std::upper_bound(offsets_.begin() + 1, offsets_.end(), begin) - (offsets_.begin() + 1);
  for (; i < tensors.size() && offsets_[i] < end; ++i) {
    const int64_t from = std::max(begin, offsets_[i]);
    const int64_t to = std::min(end, offsets_[i + 1]);
    out.narrow(0, from - begin, to - from)
        .copy_(tensors[i].reshape({-1}).narrow(0, from - offsets_[i], to - from));
  }
  const int64_t data_end = std::clamp(offsets_.back(), begin, end);
  if (data_end < end) out.narrow(0, data_end - begin, end - data_end).zero_();
}

}  // namespace pipetrain::engine
