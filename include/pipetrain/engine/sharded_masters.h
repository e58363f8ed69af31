#pragma once

#include <memory>
#include <vector>

#include "pipetrain/comm/communicator.h"
#include "pipetrain/engine/flat_shards.h"
#include "pipetrain/engine/master_weights.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::engine {

// ZeRO stages 1 and 2: the stage's parameters live in one flat buffer cut into equal
// shards, one per data-parallel rank; each rank keeps the fp32 master and optimizer state
// of its shard only. Gradients are reduce-scattered onto the shards (not all-reduced),
// each rank steps its shard, and the updated shards are all-gathered into every replica's
// flat buffer. Stage 2 also drops the model's full gradients as soon as they are reduced.
// Unlike stage 0 at data-parallel size 1, a parameter that got no gradient steps with a
// zero one (weight decay and momentum still move it).
// With an fp32 model the master shard is the rank's part of the flat buffer itself.
class ShardedMasters : public MasterWeights {
 public:
  // `data`: the data-parallel group (the same stage and model rank), over which the
  // other methods but master_bytes() are collective. Re-seats every parameter's storage in the flat
  // buffer (values kept), so nothing may move the module to another device or dtype afterwards.
  // `wire`: the dtype gradients are reduced in; `decayed`: per parameter, whether weight
  // decay applies to it.
  ShardedMasters(const std::vector<at::Tensor>& parameters,
                 const std::vector<at::Tensor>& norm_parameters, const std::vector<bool>& decayed,
                 std::shared_ptr<const topology::Grid> grid,
                 std::shared_ptr<comm::Communicator> data, const ZeroConfig& zero,
                 at::ScalarType wire);

  const std::vector<at::Tensor>& tensors() const override { return master_; }
  void take_gradients(double unscale) override;
  void apply_weight_decay(const optim::WeightDecay& decay, double lr) override;
  double global_grad_norm() const override;
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
  // Elements per rank in one reduce-scatter or all-gather of at most `bucket` elements.
  int64_t per_rank(int64_t bucket) const;
  // A whole flat vector (every rank's shard) as one tensor per parameter.
  std::vector<at::Tensor> per_parameter(const at::Tensor& flat) const;
  // Flat elements [begin, begin + count) of the ranks' `shard`s, joined on rank 0 (the
  // other ranks send their part and get an undefined tensor).
  at::Tensor gathered(const at::Tensor& shard, int64_t begin, int64_t count) const;

  std::shared_ptr<const topology::Grid> grid_;
  std::shared_ptr<comm::Communicator> data_;
  ZeroConfig zero_;
  at::ScalarType wire_;
  std::vector<at::Tensor> parameters_;
  FlatShards layout_;
  at::Tensor flat_;                 // every parameter's storage, in the model's dtype
  at::Tensor own_;                  // this rank's shard of flat_
  bool aliased_;                    // the master is own_ itself (fp32 model)
  std::vector<at::Tensor> master_;  // the fp32 shard the optimizer steps
  at::Tensor norm_mask_;            // 1 where an element counts in the norm; undefined: all
  at::Tensor decay_mask_;           // true where weight decay applies; undefined: everywhere
  bool any_decayed_ = false;
};

}  // namespace pipetrain::engine
