#include "models/kv_cache.h"

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

KvCache::Extended KvCache::extend(const void* layer, const at::Tensor& k, const at::Tensor& v,
                                  int64_t window) {
  Layer& cached = layers_[layer];
  const int64_t length = cached.length + k.size(2);
  const int64_t held = cached.length - cached.first;
  if (!cached.keys.defined() || length - cached.first > cached.keys.size(2)) {
    // Only the positions a new one can still see (all without a window) move to a room
    // for at least twice those: copied O(log n) times, not once per token.
    const int64_t kept = window > 0 ? std::min(held, window - 1) : held;
    const int64_t first = cached.length - kept;
    const auto grown = [&](const at::Tensor& old, const at::Tensor& fresh) {
      std::vector<int64_t> shape = fresh.sizes().vec();
      shape[2] = std::max<int64_t>(2 * (kept + fresh.size(2)), 16);
      at::Tensor room = at::empty(shape, fresh.options());
      if (kept > 0) room.narrow(2, 0, kept).copy_(old.narrow(2, held - kept, kept));
      return room;
    };
    cached.keys = grown(cached.keys, k);
    cached.values = grown(cached.values, v);
    cached.first = first;
  }
  const int64_t at = cached.length - cached.first, stored = length - cached.first;
  cached.keys.narrow(2, at, k.size(2)).copy_(k);
  cached.values.narrow(2, at, v.size(2)).copy_(v);
  cached.length = length;
  return {cached.keys.narrow(2, 0, stored), cached.values.narrow(2, 0, stored), cached.first};
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

at::Tensor causal_window_mask(int64_t first_query, int64_t queries, int64_t first_key, int64_t keys,
                              int64_t window, const at::Device& device) {
  const auto on = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor query = at::arange(first_query, first_query + queries, on).unsqueeze(1);
  const at::Tensor key = at::arange(first_key, first_key + keys, on).unsqueeze(0);
  at::Tensor seen = key <= query;
  if (window > 0) seen = seen & (key > query - window);
  return seen;
}

at::Tensor cached_attention(KvCache& cache, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query,
                            int64_t window) {
  if (at::GradMode::is_enabled() && q.requires_grad())
    throw std::logic_error("a KV cache is for generation: it is active while training");
  const int64_t offset = cache.length(), fresh = q.size(2);
  const KvCache::Extended cached = cache.extend(layer, k, v, window);
  const int64_t keys = cached.keys.size(2);
  // Every key seen: a prefill is exactly the uncached computation, one new position past
  // the window's edge needs no mask.
  const bool windowed = window > 0 && offset + fresh - cached.first > window;
  if (offset == 0 && !windowed) {
    return at::scaled_dot_product_attention(q, cached.keys, cached.values, {}, 0.0,
                                            /*is_causal=*/true, {}, grouped_query);
  }
  std::optional<at::Tensor> mask;  // none for one new position that sees every key
  if (fresh > 1 || windowed)
    mask = causal_window_mask(offset, fresh, cached.first, keys, window, q.device());
  return at::scaled_dot_product_attention(q, cached.keys, cached.values, mask, 0.0,
                                          /*is_causal=*/false, {}, grouped_query);
}

at::Tensor cached_attention(const KvRows& rows, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query,
                            int64_t window) {
  if (rows.size() != q.size(0)) {
    throw std::invalid_argument("attention over " + std::to_string(q.size(0)) + " rows with " +
                                std::to_string(rows.size()) + " KV caches");
  }
  if (rows.size() == 1) return cached_attention(rows[0], layer, q, k, v, grouped_query, window);
  std::vector<at::Tensor> each;
  for (int64_t r = 0; r < rows.size(); ++r) {
    each.push_back(cached_attention(rows[r], layer, q.narrow(0, r, 1), k.narrow(0, r, 1),
                                    v.narrow(0, r, 1), grouped_query, window));
  }
  return at::cat(each, 0);
}

}  // namespace pipetrain::models
