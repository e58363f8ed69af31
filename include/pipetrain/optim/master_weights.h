#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "pipetrain/comm/tensor_list.h"
#include "pipetrain/optim/optimizer.h"

namespace pipetrain::optim {

// A parameter's fp32 master and optimizer state as a checkpoint holds them: whole, in the
// parameter's shape, whatever the layout of the run that saved them.
struct ParameterState {
  at::Tensor master;
  comm::NamedTensors optimizer_state;  // empty before the first step
};

// Where the fp32 weights the optimizer updates live, and how the model's gradients reach
// them and the updated values return: one master per parameter on every replica
// (ReplicatedMasters), or one flat shard per data-parallel rank (ShardedMasters, ZeRO), or
// the two side by side when ZeRO meets experts split over ranks (ExpertSplitMasters).
// MixedPrecisionOptimizer does the rest (loss scaling, overflow, clipping, the step).
class MasterWeights {
 public:
  virtual ~MasterWeights() = default;

  // What the optimizer steps; each has its fp32 gradient after take_gradients().
  virtual const std::vector<at::Tensor>& tensors() const = 0;
  // Puts the model's gradients, averaged over the data-parallel replicas and multiplied by
  // `unscale`, onto the masters' gradients in fp32.
  virtual void take_gradients(double unscale) = 0;
  // Weight decay at learning rate `lr` on the parameters it applies to (see
  // WeightDecayRule), where they have gradients; before the optimizer steps them.
  virtual void apply_weight_decay(const optim::WeightDecay& decay, double lr) = 0;
  // The sum of squares of this stage's and model rank's gradients (each tensor counted
  // once), summed over the ranks that split them (data-parallel shards, expert groups):
  // collective over those; the pipe and model sums are the caller's. A double on the CPU.
  virtual at::Tensor squared_grad_norm() const = 0;
  // The model takes the masters' values (after a step or a load).
  virtual void copy_to_model() = 0;
  // Drops the model's gradients (the next backward starts from none).
  virtual void clear_model_gradients() = 0;
  // Bytes of fp32 masters held beside the model's own parameters.
  virtual int64_t master_bytes() const = 0;

  // For checkpoints: each parameter's master and `optimizer`'s state of it, whole, in the
  // order of the parameters the masters were built over; restore() installs such values
  // (then copy_to_model()). Under ZeRO both are collective over the data-parallel group.
  virtual std::vector<ParameterState> whole_state(torch::optim::Optimizer& optimizer) const = 0;
  // For saving: parameter `position`'s master and state, whole on data-parallel rank 0.
  // Under ZeRO it is collective over the data-parallel group: the other ranks send their
  // parts to rank 0 and get no per-element state back (and the master only where it is a
  // view of their whole flat weights), so no rank joins more than the tensors it writes.
  virtual ParameterState gathered_state(torch::optim::Optimizer& optimizer,
                                        std::size_t position) const = 0;
  virtual void restore(const std::vector<ParameterState>& whole,
                       torch::optim::Optimizer& optimizer) = 0;
};

}  // namespace pipetrain::optim
