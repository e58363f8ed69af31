#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/comm/communicator.h"
#include "pipetrain/data_parallel/flat_shards.h"
#include "pipetrain/data_parallel/sharded_parameters.h"
#include "pipetrain/data_parallel/sharded_reduction.h"
#include "pipetrain/data_parallel/zero_config.h"
#include "pipetrain/optim/master_weights.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::optim {

// ZeRO stages 1 to 3, the masters: each rank keeps the fp32 master and optimizer state of
// its pieces of the buckets a data_parallel::ShardedReduction lays out (one tensor per
// bucket; with an fp32 model the pieces of the flat buffer themselves), takes the reduced
// pieces of the gradients from it (it starts no reduction), steps them, and all-gathers
// the updated pieces into every replica's flat buffer.
// Stage 3 keeps no flat buffer: each rank holds its pieces only (ShardedParameters), the
// updated pieces are written there and gathered when a layer runs (LayerGathering), not
// after the step.
// Unlike stage 0 at data-parallel size 1, a parameter that got no gradient steps with a
// zero one (weight decay and momentum still move it).
class ShardedMasters : public MasterWeights {
 public:
  // The masters of `reduction`'s parameters, over its group (the replicas holding them),
  // over which the other methods but master_bytes() are collective. Re-seats every
  // parameter's storage in the flat buffer (values kept), so nothing may move the module
  // to another device or dtype afterwards (stage 3: the reduction's ShardedParameters hold
  // them). `decayed`: per parameter, whether weight decay applies to it.
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
  bool fp32_model() const { return flat_.scalar_type() == at::kFloat; }
  // Between steps every replica's flat buffer holds the whole model (below stage 3).
  bool whole_flat() const { return !sharded_; }
  // This rank's piece of bucket k in the model's dtype.
  at::Tensor own_piece(int k) const;

  std::shared_ptr<data_parallel::ShardedReduction> reduction_;
  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;  // the reduction's group
  data_parallel::ZeroConfig zero_;
  std::vector<at::Tensor> parameters_;
  const data_parallel::FlatShards& layout_;  // the reduction's
  at::Tensor flat_;  // every parameter's storage, in the model's dtype (stage 3: empty)
  std::shared_ptr<data_parallel::ShardedParameters> sharded_;  // stage 3: the parameters' storage
  bool aliased_;                    // the masters are this rank's pieces of flat_ itself
  std::vector<at::Tensor> master_;  // the fp32 pieces the optimizer steps, one per bucket
  at::Tensor norm_mask_;            // 1 where an element counts in the norm; undefined: all
  at::Tensor decay_mask_;           // true where weight decay applies; undefined: everywhere
  bool any_decayed_ = false;
};

}  // namespace pipetrain::optim
