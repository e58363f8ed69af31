#pragma once

#include <ATen/core/Tensor.h>

// Losses a layer adds to the training objective where it computes them (an MoE router's
// load-balancing loss), without carrying them to the last stage: the layer attaches the
// loss to its output, and backward through that output gives the loss its gradient. So
// the loss is right under every schedule, split backward and activation checkpointing
// (recomputation attaches it again), on whichever stage holds the layer.
namespace pipetrain::module {

// `activation`, unchanged; backward through the result also back-propagates `loss` (a
// scalar) with the gradient auxiliary_loss_scale() had when this ran.
at::Tensor with_auxiliary_loss(const at::Tensor& activation, const at::Tensor& loss);

// The weight of an auxiliary loss against the gradient of the training loss: the engine
// scales each micro-batch's loss by loss_scale / micro_batches, and sets this scope to the
// same for its step. 1 outside any scope (one plain backward of one batch). Process-wide,
// as autograd runs CUDA backward on its own threads.
class AuxiliaryLossScale {
 public:
  explicit AuxiliaryLossScale(double scale);
  ~AuxiliaryLossScale();
  AuxiliaryLossScale(const AuxiliaryLossScale&) = delete;
  AuxiliaryLossScale& operator=(const AuxiliaryLossScale&) = delete;

 private:
  double previous_;
};

double auxiliary_loss_scale();

}  // namespace pipetrain::module
