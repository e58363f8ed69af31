#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data_parallel/flat_shards.h"
#include "data_parallel/replica_parameters.h"
#include "data_parallel/sharded_reduction.h"
#include "pipetrain/comm/communicator.h"
#include "pipetrain/optim/master_weights.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::optim {

// ZeRO stages 1 to 3, the masters: each rank keeps the fp32 master and optimizer state of
// its pieces of the buckets a data_parallel::ShardedReduction lays out (one tensor per
// bucket; with an fp32 model the pieces of the parameters' storage themselves), takes the
// reduced pieces of the gradients from it, steps them, writes them into the reduction's
// parameter storage and asks it to gather them (stages 1 and 2: into every replica's
// whole copy after the step; stage 3: when a layer next runs). It starts no collective of
// its own but the norm's.
// Unlike stage 0 at data-parallel size 1, a parameter that got no gradient steps with a
// zero one (weight decay and momentum still move it).
class ShardedMasters : public MasterWeights {
 public:
  // The masters of `reduction`'s parameters, over its group (the replicas holding them),
  // over which the other methods but master_bytes() are collective. `decayed`: per
  // parameter, whether weight decay applies to it.
  ShardedMasters(std::shared_ptr<data_parallel::ShardedReduction> reduction,
                 const std::vector<at::Tensor>& norm_parameters, const std::vector<bool>& decayed,
                 std::shared_ptr<const topology::Grid> grid);

  const std::vector<at::Tensor>& tensors() const override { return master_; }
  void take_gradients(double unscale) override;
  void apply_weight_decay(const optim::WeightDecay& decay, double lr) override;
  at::Tensor squared_grad_norm() const override;
  void copy_to_model() override;
  void clear_model_gradients() override;
  int64_t master_bytes() const override;
  std::vector<ParameterState> whole_state(torch::optim::Optimizer& optimizer) const override;
  ParameterState gathered_state(torch::optim::Optimizer& optimizer,
                                std::size_t position) const override;
  void restore(const std::vector<ParameterState>& whole,
               torch::optim::Optimizer& optimizer) override;

 private:
  void build_norm_mask(const std::vector<at::Tensor>& norm_parameters);
  // This rank's elements of the parameters `chosen` marks: 1, else 0; undefined when every
  // parameter is chosen.
  at::Tensor shard_mask(const std::vector<bool>& chosen) const;
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
  // Between steps the parameters hold the masters' values: whole (below stage 3) and fp32.
  bool parameters_are_masters() const { return aliased_ && storage_->whole(); }

  std::shared_ptr<data_parallel::ShardedReduction> reduction_;
  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;                   // the reduction's group
  std::shared_ptr<data_parallel::ReplicaParameters> storage_;  // the reduction's
  std::vector<at::Tensor> parameters_;
  const data_parallel::FlatShards& layout_;  // the reduction's
  bool aliased_;  // fp32: the masters are this rank's pieces of the storage themselves
  std::vector<at::Tensor> master_;  // the fp32 pieces the optimizer steps, one per bucket
  at::Tensor norm_mask_;            // 1 where an element counts in the norm; undefined: all
  at::Tensor decay_mask_;           // true where weight decay applies; undefined: everywhere
  bool any_decayed_ = false;
};

}  // namespace pipetrain::optim
