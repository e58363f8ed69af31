#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/comm/communicator.h"
#include "pipetrain/data_parallel/bucket_reduction.h"
#include "pipetrain/data_parallel/flat_shards.h"
#include "pipetrain/data_parallel/sharded_parameters.h"
#include "pipetrain/data_parallel/zero_config.h"
#include "pipetrain/optim/master_weights.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::optim {

// ZeRO stages 1 to 3: the stage's parameters are laid out in buckets (FlatShards: at most
// zero.reduce_bucket_size elements each at stage 1, one per layer at stages 2 and 3, in the
// order backward finishes them, each bucket cut into one piece per data-parallel rank); each
// rank keeps the fp32 master and optimizer state of its pieces only. Each bucket's gradients are
// reduce-scattered onto the pieces (not all-reduced): during the last backward passes when
// GradientBuckets drives this class as its BucketReduction, else in take_gradients(). Each
// rank steps its shard, and the updated pieces are all-gathered into every replica's flat
// buffer. Stages 2 and 3 keep one bucket per layer and reduce-scatter after every backward
// pass instead (the buckets that hold gradients then, each freed once copied for the
// collective), adding the pieces into fp32 accumulators, so no full gradient outlives its
// pass: a lower peak for m reduce-scatters per step in place of one (tied gradients, summed
// among stages after the last pass, are still reduced once).
// Stage 3 keeps no flat buffer: one bucket per layer, each rank holds its pieces only
// (ShardedParameters), the updated pieces are written there and gathered when a layer
// runs (LayerGathering), not after the step.
// Unlike stage 0 at data-parallel size 1, a parameter that got no gradient steps with a
// zero one (weight decay and momentum still move it).
// The masters are one tensor per bucket (the rank's piece of it); with an fp32 model they
// are the pieces of the flat buffer themselves.
class ShardedMasters : public MasterWeights, public data_parallel::BucketReduction {
 public:
  // `data`: the data-parallel group (the same stage and model rank), over which the
  // other methods but master_bytes() are collective. Re-seats every parameter's storage in the flat
  // buffer (values kept), so nothing may move the module to another device or dtype afterwards.
  // `wire`: the dtype gradients are reduced in; `decayed`: per parameter, whether weight
  // decay applies to it; `late`: whether its gradient changes after backward (tied ones,
  // summed among stages first; empty: none), kept out of the other buckets; `layers`: per
  // parameter, its layer (the buckets of stages 2 and 3; else unused).
  ShardedMasters(const std::vector<at::Tensor>& parameters,
                 const std::vector<at::Tensor>& norm_parameters, const std::vector<bool>& decayed,
                 const std::vector<bool>& late, const std::vector<int>& layers,
                 std::shared_ptr<const topology::Grid> grid,
                 std::shared_ptr<comm::Communicator> data, const data_parallel::ZeroConfig& zero,
                 at::ScalarType wire);

  // Stage 3: where the parameters live (null below stage 3).
  const std::shared_ptr<data_parallel::ShardedParameters>& sharded_parameters() const {
    return sharded_;
  }

  const std::vector<at::Tensor>& tensors() const override { return master_; }
  void take_gradients(double unscale) override;
  void apply_weight_decay(const optim::WeightDecay& decay, double lr) override;
  at::Tensor squared_grad_norm() const override;
  void copy_to_model() override;
  void clear_model_gradients() override;
  void begin_step() override;
  void after_backward_pass() override;
  int64_t master_bytes() const override;
  std::vector<ParameterState> whole_state(torch::optim::Optimizer& optimizer) const override;
  ParameterState gathered_state(torch::optim::Optimizer& optimizer,
                                std::size_t position) const override;
  void restore(const std::vector<ParameterState>& whole,
               torch::optim::Optimizer& optimizer) override;

  // BucketReduction: a bucket's gradients reduce-scattered onto this rank's piece of it.
  const std::vector<std::vector<std::size_t>>& buckets() const override { return buckets_; }
  comm::WorkPtr start(int k) override;
  void complete(int k) override;
  void abandon(int k) override;

 private:
  void seat_parameters();
  void build_norm_mask(const std::vector<at::Tensor>& norm_parameters);
  // This rank's elements of the parameters `chosen` marks: 1, else 0; undefined when every
  // parameter is chosen.
  at::Tensor shard_mask(const std::vector<bool>& chosen) const;
  // Elements per rank in one all-gather of at most `bucket` elements of a piece of `piece`.
  int64_t per_rank(int64_t bucket, int64_t piece) const;
  // A whole flat vector (every rank's shard) as one tensor per parameter.
  std::vector<at::Tensor> per_parameter(const at::Tensor& flat) const;
  // Parameter `position`'s elements of the ranks' `pieces` (one per bucket, as master_),
  // joined on rank 0 (the other ranks send their part and get an undefined tensor).
  at::Tensor gathered(const std::vector<at::Tensor>& pieces, std::size_t position) const;
  // This rank's piece of bucket k in a shard-long tensor.
  at::Tensor piece_of(const at::Tensor& shard, int k) const;
  // `optimizer`'s state of the master pieces: per entry, one tensor per piece.
  std::vector<std::pair<std::string, std::vector<at::Tensor>>> piece_state(
      torch::optim::Optimizer& optimizer) const;
  void reduce_all();  // every bucket not yet reduced this step, one after another
  // Starts bucket k's reduce-scatter from the model's gradients.
  comm::WorkPtr start_reduce(int k);
  // Reduced after each pass (stages 2 and 3), not by start() and complete().
  bool reduced_per_pass(int k) const { return per_pass_ && !late_bucket_[k]; }
  bool fp32_model() const { return flat_.scalar_type() == at::kFloat; }
  // Between steps every replica's flat buffer holds the whole model (below stage 3).
  bool whole_flat() const { return !sharded_; }
  // This rank's piece of bucket k in the model's dtype.
  at::Tensor own_piece(int k) const;

  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;
  data_parallel::ZeroConfig zero_;
  at::ScalarType wire_;
  std::vector<at::Tensor> parameters_;
  std::vector<std::vector<std::size_t>> buckets_;  // parameter indices, in reduction order
  data_parallel::FlatShards layout_;
  at::Tensor flat_;  // every parameter's storage, in the model's dtype (stage 3: empty)
  std::shared_ptr<data_parallel::ShardedParameters> sharded_;  // stage 3: the parameters' storage
  bool aliased_;                         // the masters are this rank's pieces of flat_ itself
  std::vector<at::Tensor> master_;       // the fp32 pieces the optimizer steps, one per bucket
  std::vector<at::Tensor> grads_;        // per bucket: this rank's piece of the reduced gradient
  std::vector<bool> complete_;           // per bucket: reduced this step
  bool per_pass_;                        // stages 2 and 3: reduced after every backward pass
  std::vector<bool> late_bucket_;        // per bucket: of late (tied) gradients
  std::vector<at::Tensor> accumulated_;  // per bucket: the passes' reduced pieces, fp32
  at::Tensor norm_mask_;                 // 1 where an element counts in the norm; undefined: all
  at::Tensor decay_mask_;                // true where weight decay applies; undefined: everywhere
  bool any_decayed_ = false;
};

}  // namespace pipetrain::optim
