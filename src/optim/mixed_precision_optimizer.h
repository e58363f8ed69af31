#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "data_parallel/sharded_reduction.h"
#include "optim/sharded_masters.h"
#include "pipetrain/comm/communicator.h"
#include "pipetrain/module/pipeline_module.h"
#include "pipetrain/optim/loss_scaler.h"
#include "pipetrain/optim/master_weights.h"
#include "pipetrain/optim/optimizer.h"
#include "pipetrain/optim/optimizer_config.h"
#include "pipetrain/optim/precision.h"
#include "pipetrain/topology/grid.h"

namespace pipetrain::optim {

// The tensor type of a precision.
at::ScalarType to_scalar_type(Precision precision);

// The optimizer step of a pipeline stage in any precision: the model in fp32, bf16 or
// fp16, fp32 master weights that the optimizer updates, the fp16 loss scaler (an overflow
// on any rank skips the step on every rank), global-norm clipping, the learning-rate
// schedule and weight decay on the parameters config.weight_decay_exempt leaves to it.
class MixedPrecisionOptimizer {
 public:
  // Keeps fp32 masters of the module's parameters, which a 16-bit precision needs in its
  // dtype already (fp32: the parameters themselves where they are fp32): all of them or,
  // under ZeRO (where `sharded.dense` is set), this rank's shard of `sharded`'s pieces
  // (collective over their groups then).
  // `norm_parameters`: the module parameters this rank counts in the global gradient norm
  // (see GradientSync); `sharded`: under ZeRO, the reductions whose pieces the masters take
  // (GradientSync's); `expert_parameters`: those split over the expert-parallel group (whole
  // masters on the ranks holding them; under ZeRO sharded where sharded.experts is set).
  MixedPrecisionOptimizer(module::PipelineModule& module,
                          std::shared_ptr<const topology::Grid> grid, const StepConfig& config,
                          const std::vector<at::Tensor>& norm_parameters,
                          const data_parallel::ShardedReductions& sharded = {},
                          const std::vector<at::Tensor>& expert_parameters = {});

  // What a micro-batch's loss is multiplied by before backward (1 but under fp16).
  double loss_scale() const { return loss_scaler_.scale(); }
  at::ScalarType dtype() const { return dtype_; }
  // Whether ZeRO shards the masters and their state among the replicas.
  bool sharded() const { return sharded_masters_ != nullptr; }

  // Collective over the grid's world: moves the model's gradients, as data parallelism
  // reduced them (under ZeRO its reduced pieces), onto the masters (unscaled), agrees on
  // overflow, clips, sets the rate of step `step` (0-based), steps, copies the masters back
  // into the model and clears every gradient.
  void step(int64_t step);

  // Of the last step that was not skipped: the global gradient norm before clipping (NaN
  // when neither clipping nor set_grad_norm_wanted needed it: it costs a pass over every
  // gradient and a reduction over the pipe), the rate.
  double last_grad_norm() const { return last_grad_norm_; }
  void set_grad_norm_wanted(bool on) { norm_wanted_ = on; }
  double last_learning_rate() const { return last_learning_rate_; }

  // Bytes this rank holds for the optimizer: its state (moments, momentum) and fp32
  // masters kept beside the model's parameters. 0 before the first step creates state.
  int64_t state_bytes();

  // Checkpoints: every parameter's fp32 master and optimizer state, whole, in the
  // module's parameter order; restore() installs such values and the model takes them.
  // Under ZeRO both are collective over the data-parallel group.
  std::vector<ParameterState> whole_state();
  ParameterState gathered_state(std::size_t position);
  void restore(const std::vector<ParameterState>& whole);

  // Stage 0 only (throws under ZeRO, where no rank holds every master).
  const at::Tensor& master_of(const at::Tensor& parameter) const;
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  optim::LossScaler& loss_scaler() { return loss_scaler_; }
  const optim::LossScaler& loss_scaler() const { return loss_scaler_; }
  // Per parameter of the module (parameters() order), whether weight decay applies to it.
  const std::vector<bool>& decayed() const { return decayed_; }

 private:
  // Under ZeRO: the masters, the dense part sharded as sharded.dense lays it out
  // (sharded_masters_) and experts split over ranks beside it: sharded as sharded.experts
  // lays them out where it is set, else whole.
  std::shared_ptr<MasterWeights> sharded_masters(module::PipelineModule& module,
                                                 const std::vector<at::Tensor>& norm_parameters,
                                                 const data_parallel::ShardedReductions& sharded,
                                                 const std::vector<at::Tensor>& expert_parameters);
  // The global gradient norm over the whole model (each tensor counted once): collective.
  double global_grad_norm() const;
  // Whether any rank's gradients overflowed (fp16 only; the step's one wait).
  bool any_overflow() const;
  void clip(double norm);

  std::shared_ptr<const topology::Grid> grid_;
  at::ScalarType dtype_;
  double clipping_;
  optim::WeightDecay weight_decay_;
  std::vector<bool> decayed_;  // per parameter: whether weight_decay_ applies
  std::shared_ptr<MasterWeights> masters_;
  std::shared_ptr<ShardedMasters> sharded_masters_;  // under ZeRO: the sharded part
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  optim::LrSchedule lr_schedule_;
  optim::LossScaler loss_scaler_;
  double last_grad_norm_ = 0;
  bool norm_wanted_ = false;
  double last_learning_rate_ = 0;
};

}  // namespace pipetrain::optim
