#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "data_parallel/bucket_reduction.h"
#include "data_parallel/flat_shards.h"
#include "data_parallel/replica_parameters.h"
#include "data_parallel/sharded_parameters.h"
#include "pipetrain/comm/communicator.h"
#include "pipetrain/data_parallel/zero_config.h"

namespace pipetrain::data_parallel {

// ZeRO's gradient reduction (stages 1 to 3) of some of a stage's parameters over a group of
// replicas: the parameters are laid out in buckets (FlatShards: at most
// zero.reduce_bucket_size elements each at stage 1, one per layer at stages 2 and 3, in the
// order backward finishes them, each bucket cut into one piece per rank), and each bucket's
// gradients are reduce-scattered (averaged, in the `wire` dtype) onto this rank's piece, not
// all-reduced.
// - Stage 1, once per step: during the last backward passes when GradientBuckets drives
//   this class as its BucketReduction, and by finish() for the buckets it did not start.
// - Stages 2 and 3, after every backward pass: the buckets that hold gradients then, each
//   model gradient freed once copied for the collective, the pieces summed in float32, so
//   no full gradient outlives its pass (a lower peak for m reduce-scatters per step in place
//   of one). Late (tied) gradients, summed among stages after the last pass, are still
//   reduced once, by finish().
// It owns the parameters among the replicas in both directions: their gradients reduced
// onto pieces, and their storage (storage()), which gathers the updated pieces. The
// optimizer's masters (optim::ShardedMasters) take the reduced pieces, write the updated
// ones and call gather_parameters(); they start no collective of their own.
class ShardedReduction final : public BucketReduction {
 public:
  // Collective over `group` (the replicas holding the same parameters) in every method but
  // buckets(), layout() and take(). `late`: per parameter, whether its gradient changes
  // after backward, kept out of the other buckets; `layers`: per parameter, its layer (the
  // buckets of stages 2 and 3, and stage 3's gathering; else unused).
  ShardedReduction(std::vector<at::Tensor> parameters, const std::vector<bool>& late,
                   const std::vector<int>& layers, std::shared_ptr<comm::Communicator> group,
                   const ZeroConfig& zero, at::ScalarType wire);
  // Its storage holds its layout: neither copied nor moved.
  ShardedReduction(const ShardedReduction&) = delete;
  ShardedReduction& operator=(const ShardedReduction&) = delete;

  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  const FlatShards& layout() const { return layout_; }
  const std::shared_ptr<comm::Communicator>& group() const { return group_; }
  const ZeroConfig& zero() const { return zero_; }
  // Where the parameters live among the replicas, laid out as layout(): made with the
  // reduction, from the parameters' values then (their dtype and device must be final).
  // Stages 1 and 2: a flat buffer whole on every replica; stage 3: this rank's pieces only,
  // sharded_parameters() (else null), which a LayerGathering gathers layer by layer.
  const std::shared_ptr<ReplicaParameters>& storage() const { return storage_; }
  const std::shared_ptr<ShardedParameters>& sharded_parameters() const { return sharded_; }

  // BucketReduction: bucket k's gradients reduce-scattered onto this rank's piece of it
  // (nothing to do for a bucket reduced after each pass).
  const std::vector<std::vector<std::size_t>>& buckets() const override { return buckets_; }
  comm::WorkPtr start(int k) override;
  void complete(int k) override;
  void abandon(int k) override;

  // A training step begins (forgetting what one that threw left); a backward pass has
  // ended (stages 2 and 3 reduce then); every bucket not yet reduced this step, one after
  // another.
  void begin_step();
  void after_backward_pass();
  void finish();
  // After finish(): bucket k's reduced piece in float32 (its passes' sum at stages 2 and 3),
  // taken (the next step starts from none); undefined where no pass left a gradient.
  at::Tensor take(int k);

 private:
  // Starts bucket k's reduce-scatter from the model's gradients.
  comm::WorkPtr start_reduce(int k);
  // Reduced after each pass (stages 2 and 3), not by start() and complete().
  bool reduced_per_pass(int k) const { return per_pass_ && !late_bucket_[k]; }

  std::vector<at::Tensor> parameters_;
  std::shared_ptr<comm::Communicator> group_;
  ZeroConfig zero_;
  at::ScalarType wire_;
  std::vector<std::vector<std::size_t>> buckets_;  // parameter indices, in reduction order
  FlatShards layout_;
  std::vector<at::Tensor> pieces_;       // per bucket: this rank's piece of the reduced gradient
  std::vector<bool> complete_;           // per bucket: reduced this step
  bool per_pass_;                        // stages 2 and 3: reduced after every backward pass
  std::vector<bool> late_bucket_;        // per bucket: of late (tied) gradients
  std::vector<at::Tensor> accumulated_;  // per bucket: the passes' reduced pieces, float32
  std::shared_ptr<ShardedParameters> sharded_;  // stage 3
  std::shared_ptr<ReplicaParameters> storage_;  // every stage's (stage 3: sharded_)
};

// Under ZeRO, the reductions of a stage's gradients: the dense parameters' over the
// data-parallel replicas, and, where several ranks hold the same experts, the experts'
// over those ranks (ZeRO 1 for them at any stage: their weights stay whole). Null where
// there is none.
struct ShardedReductions {
  std::shared_ptr<ShardedReduction> dense;
  std::shared_ptr<ShardedReduction> experts;
};

}  // namespace pipetrain::data_parallel
