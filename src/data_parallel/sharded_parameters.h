#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data_parallel/flat_shards.h"
#include "data_parallel/replica_parameters.h"
#include "pipetrain/comm/communicator.h"

namespace pipetrain::data_parallel {

// ZeRO stage 3's home of a stage's parameters: per bucket of `layout`, this rank's piece
// (kept) and, only while the bucket is gathered, the whole bucket, in whose storage the
// bucket's parameters lie. Released, the parameters keep their shapes but hold no bytes:
// nothing may read them until the bucket is gathered again. Writing a piece does not bump
// the parameters' version counters, so autograd's saved parameters stay valid across a
// release and a gather.
class ShardedParameters final : public ReplicaParameters {
 public:
  // Moves each parameter's values into this rank's pieces and re-seats its storage in its
  // bucket's (released) whole; collective calls go over `data` (the layout's shards).
  // `layers`: per parameter, the layer it belongs to.
  ShardedParameters(const std::vector<at::Tensor>& parameters, const std::vector<int>& layers,
                    const FlatShards& layout, std::shared_ptr<comm::Communicator> data);
  ShardedParameters(const ShardedParameters&) = delete;
  ShardedParameters& operator=(const ShardedParameters&) = delete;

  int buckets() const { return static_cast<int>(buckets_.size()); }
  // The buckets holding layer `layer`'s parameters (none for a layer without).
  std::vector<int> buckets_of(int layer) const;
  // ReplicaParameters: this rank's piece of bucket k; gather_parameters() releases every
  // gathered copy (each gathered anew when its layer runs).
  at::Tensor piece(int k) const override { return buckets_[k].piece; }
  void gather_parameters() override { release_all(); }
  bool whole() const override { return false; }

  // Starts gathering bucket k from every rank's piece (nothing if gathered or on its way).
  void start(int k);
  // Bucket k gathered: its parameters hold their values.
  void wait(int k);
  // Frees bucket k's whole copy (waiting for a gather on its way).
  void release(int k);
  void release_all();
  // After a failure: forgets gathers on their way (their memory is kept for good, as MPI
  // may still write it) and frees the rest.
  void abandon();

  // Buckets gathered (or on their way) now, and the most at once so far.
  int gathered_count() const { return gathered_; }
  int peak_gathered() const { return peak_; }

 private:
  enum class State { kReleased, kGathering, kGathered };
  struct Member {
    at::Tensor parameter;
    int64_t offset = 0;  // in the bucket
  };
  struct Bucket {
    std::vector<Member> members;
    std::vector<int> layers;
    at::Tensor piece;  // this rank's elements, kept
    at::Tensor whole;  // the bucket's elements; its storage has bytes only while gathered
    State state = State::kReleased;
    comm::WorkPtr work;
  };

  // A new, released whole for `bucket`, its parameters seated in it.
  void seat(Bucket& bucket, const at::TensorOptions& options, int64_t size);
  void free_whole(Bucket& bucket);

  std::shared_ptr<comm::Communicator> data_;
  std::vector<Bucket> buckets_;
  struct Abandoned {  // a gather left on its way, with the storage it may still write
    comm::WorkPtr work;
    at::Tensor whole;
  };
  std::vector<Abandoned> abandoned_;
  int gathered_ = 0;
  int peak_ = 0;
};

}  // namespace pipetrain::data_parallel
