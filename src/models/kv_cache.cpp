#include "pipetrain/models/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pipetrain::models {
namespace {

KvRows& current() {
  static thread_local KvRows rows;
  return rows;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> KvCache::extend(const void* layer, const at::Tensor& k,
                                                  const at::Tensor& v) {
  Layer& cached = layers_[layer];
  const int64_t length = cached.length + k.size(2);
  if (!cached.keys.defined() || length > cached.keys.size(2)) {
    // Room for at least twice the positions: copied O(log n) times, not once per token.
    const auto grown = [&](const at::Tensor& old, const at::Tensor& fresh) {
      std::vector<int64_t> shape = fresh.sizes().vec();
      shape[2] = std::max<int64_t>(2 * length, 16);
      at::Tensor room = at::empty(shape, fresh.options());
      if (cached.length > 0)
        room.narrow(2, 0, cached.length).copy_(old.narrow(2, 0, cached.length));
      return room;
    };
    cached.keys = grown(cached.keys, k);
    cached.values = grown(cached.values, v);
  }
  cached.keys.narrow(2, cached.length, k.size(2)).copy_(k);
  cached.values.narrow(2, cached.length, v.size(2)).copy_(v);
  cached.length = length;
  return {cached.keys.narrow(2, 0, length), cached.values.narrow(2, 0, length)};
}

void KvCache::clear() {
  layers_.clear();
  length_ = 0;
}

KvRows::KvRows(std::vector<KvCache*> rows) : rows_(std::move(rows)) {
  for (const KvCache* row : rows_) {
    if (!row) throw std::invalid_argument("a KV cache row is null");
  }
}

std::vector<int64_t> KvRows::lengths() const {
  std::vector<int64_t> lengths;
  for (const KvCache* row : rows_) lengths.push_back(row->length());
  return lengths;
}

at::Tensor KvRows::positions(int64_t count) const {
  if (rows_.size() == 1) return at::arange(rows_[0]->length(), rows_[0]->length() + count);
  return at::tensor(lengths(), at::kLong).unsqueeze(1) + at::arange(count).unsqueeze(0);
}

int64_t KvRows::last_position(int64_t count) const {
  int64_t last = -1;
  for (const KvCache* row : rows_) last = std::max(last, row->length() + count - 1);
  return last;
}

const KvRows& active_kv_rows() {
  return current();
}

UsingKvCache::UsingKvCache(KvRows rows) : previous_(std::exchange(current(), std::move(rows))) {}

UsingKvCache::UsingKvCache(KvCache* cache) : UsingKvCache(cache ? KvRows({cache}) : KvRows()) {}

void UsingKvCache::activate(KvRows rows) {
  current() = std::move(rows);
}

UsingKvCache::~UsingKvCache() {
  current() = std::move(previous_);
}

at::Tensor cached_attention(KvCache& cache, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query) {
  if (at::GradMode::is_enabled() && q.requires_grad())
    throw std::logic_error("a KV cache is for generation: it is active while training");
  const int64_t offset = cache.length(), fresh = q.size(2);
  const auto [keys, values] = cache.extend(layer, k, v);
  if (offset == 0) {  // a prefill: exactly the uncached computation
    return at::scaled_dot_product_attention(q, keys, values, {}, 0.0, /*is_causal=*/true, {},
                                            grouped_query);
  }
  // New position i (absolute offset + i) sees positions 0..offset + i.
  std::optional<at::Tensor> mask;  // none for one new position: it sees every one
  if (fresh > 1) {
    mask = at::ones({fresh, offset + fresh}, q.options().dtype(at::kBool)).tril(offset);
  }
  return at::scaled_dot_product_attention(q, keys, values, mask, 0.0, /*is_causal=*/false, {},
                                          grouped_query);
}

at::Tensor cached_attention(const KvRows& rows, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query) {
  if (rows.size() != q.size(0)) {
    throw std::invalid_argument("attention over " + std::to_string(q.size(0)) + " rows with " +
                                std::to_string(rows.size()) + " KV caches");
  }
  if (rows.size() == 1) return cached_attention(rows[0], layer, q, k, v, grouped_query);
  std::vector<at::Tensor> each;
  for (int64_t r = 0; r < rows.size(); ++r) {
    each.push_back(cached_attention(rows[r], layer, q.narrow(0, r, 1), k.narrow(0, r, 1),
                                    v.narrow(0, r, 1), grouped_query));
  }
  return at::cat(each, 0);
}

}  // namespace pipetrain::models
