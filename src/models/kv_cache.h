#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace pipetrain::models {

// Keys and values of the positions already run, per attention layer of this rank's stage,
// so that generation feeds a prompt once (prefill) and then one new token at a time
// (decode) instead of the whole window per token. Each rank holds its own layers' cache
// (under tensor parallelism its own heads), in the activations' dtype and device.
class KvCache {
 public:
  // Positions cached so far: the position of the first token of the next forward pass.
  int64_t length() const { return length_; }
  // For the attention layer `layer` (its address): the cached keys and values followed by
  // `k` and `v` ([batch, heads, new positions, head dim]), which are kept for the next pass,
  // and the position of the first one returned. With a sliding `window` (> 0) the layer
  // keeps only the positions a later one can see: at most about twice the window.
  struct Extended {
    at::Tensor keys, values;
    int64_t first = 0;
  };
  Extended extend(const void* layer, const at::Tensor& k, const at::Tensor& v, int64_t window = 0);
  // After a forward pass of `positions` new positions through every layer of this rank.
  void advance(int64_t positions) { length_ += positions; }
  void clear();

 private:
  // A layer's keys and values, [batch, heads, room, head dim]: positions [first, length)
  // cached (room grows by doubling; with a window the positions out of it are dropped
  // when it fills).
  struct Layer {
    at::Tensor keys, values;
    int64_t first = 0;
    int64_t length = 0;
  };
  std::map<const void*, Layer> layers_;
  int64_t length_ = 0;
};

// The caches of a micro-batch's rows, one per row (each row a sequence of its own, with
// its own cached length), in row order: generation runs several prompts' decode steps as
// one micro-batch.
class KvRows {
 public:
  KvRows() = default;
  explicit KvRows(std::vector<KvCache*> rows);
  bool empty() const { return rows_.empty(); }
  int64_t size() const { return static_cast<int64_t>(rows_.size()); }
  // A view of the rows' caches: const, yet each cache may grow.
  KvCache& operator[](int64_t row) const { return *rows_.at(static_cast<std::size_t>(row)); }
  // Each row's cached positions, in row order.
  std::vector<int64_t> lengths() const;
  // The positions of `count` new tokens after each row's cached ones: int64 [count] for
  // one row, [rows, count] for several.
  at::Tensor positions(int64_t count) const;
  // The last such position over the rows.
  int64_t last_position(int64_t count) const;

 private:
  std::vector<KvCache*> rows_;
};

// The caches the attention layers use on this thread while a UsingKvCache is in scope (one
// per row of the activations), else none (training, evaluation, generation without a cache).
const KvRows& active_kv_rows();

// Makes `rows` (empty: none) the active caches for the scope; the outer ones come back
// after. activate() switches within the scope (one set per micro-batch in flight).
class UsingKvCache {
 public:
  explicit UsingKvCache(KvRows rows);
  explicit UsingKvCache(KvCache* cache);  // one row's, or none for null
  void activate(KvRows rows);
  ~UsingKvCache();
  UsingKvCache(const UsingKvCache&) = delete;
  UsingKvCache& operator=(const UsingKvCache&) = delete;

 private:
  KvRows previous_;
};

// Causal attention of `q` (the new positions) over the cache's keys and values followed by
// `k` and `v`, the new positions starting at cache.length(): scaled_dot_product_attention
// as without a cache for a prefill, and with the mask the offset asks for otherwise. With
// a sliding `window` (> 0) each position sees the last `window` positions, itself included.
at::Tensor cached_attention(KvCache& cache, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query = false,
                            int64_t window = 0);
// The same for each row of [rows, heads, new positions, head dim] over its own cache, the
// rows' results joined again.
at::Tensor cached_attention(const KvRows& rows, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query = false,
                            int64_t window = 0);

// The mask of `queries` positions starting at `first_query` over `keys` positions starting
// at `first_key`: causal, and within the last `window` positions (0: all); bool
// [queries, keys] on `device`.
at::Tensor causal_window_mask(int64_t first_query, int64_t queries, int64_t first_key, int64_t keys,
                              int64_t window, const at::Device& device);

}  // namespace pipetrain::models
