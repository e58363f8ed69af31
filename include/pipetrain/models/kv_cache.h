#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <utility>

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
  // `k` and `v` ([batch, heads, new positions, head dim]), which are kept for the next pass.
  std::pair<at::Tensor, at::Tensor> extend(const void* layer, const at::Tensor& k,
                                           const at::Tensor& v);
  // After a forward pass of `positions` new positions through every layer of this rank.
  void advance(int64_t positions) { length_ += positions; }
  void clear();

 private:
  // A layer's keys and values, [batch, heads, room, head dim], the first `length`
  // positions cached (room grows by doubling).
  struct Layer {
    at::Tensor keys, values;
    int64_t length = 0;
  };
  std::map<const void*, Layer> layers_;
  int64_t length_ = 0;
};

// The cache the attention layers use on this thread while a UsingKvCache is in scope, else
// null (training, evaluation, generation without a cache).
KvCache* active_kv_cache();

// Makes `cache` (null: none) the active one for the scope; the outer one comes back after.
// activate() switches within the scope (one cache per micro-batch in flight).
class UsingKvCache {
 public:
  explicit UsingKvCache(KvCache* cache);
  void activate(KvCache* cache);
  ~UsingKvCache();
  UsingKvCache(const UsingKvCache&) = delete;
  UsingKvCache& operator=(const UsingKvCache&) = delete;

 private:
  KvCache* previous_;
};

// Causal attention of `q` (the new positions) over the cache's keys and values followed by
// `k` and `v`, the new positions starting at cache.length(): scaled_dot_product_attention
// as without a cache for a prefill, and with the mask the offset asks for otherwise.
at::Tensor cached_attention(KvCache& cache, const void* layer, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, bool grouped_query = false);

}  // namespace pipetrain::models
