#pragma once

#include <vector>

#include "pipetrain/models/layer_cost.h"
#include "pipetrain/models/model_config.h"

namespace pipetrain::models {

// A model's layer costs measured on this machine instead of counted: what the planner uses
// for a family whose row has no `costs` but `measure_costs` (FamilyRow). The
// family's build runs on this process, whole, in float32 on the CPU, one layer at a time
// over micro-batches of one and two samples; per sample, each layer's
//   - parameters and largest tensor, as built;
//   - activations kept for backward (what its forward adds to what is held in the model's
//     forward as a stage runs it: its output, less its input where nothing keeps that) and
//     the gradients in flight during its backward (the most held beyond what backward starts
//     with), as the difference between the two micro-batches, so that what does not grow
//     with the batch (weights, their gradients) drops out;
//   - the last layer with the loss: what the loss keeps, in float32 as the engine computes it;
//   - a gradient built whole beside the accumulated one (an embedding's table): what its
//     backward holds whatever the batch, as large as its parameters (`dense_gradient`);
//   - FLOPs: its forward and backward times per sample (the fastest of three runs, the
//     difference of the two micro-batches: a call's own cost drops out, the planner adds its
//     layer overhead), as this machine's float32 matrix products at the layer's width compute
//     in that time (so that a cluster file calibrated here predicts those times).
// Its memory follows the family's real tensors (on the CPU: a GPU's attention kernels keep
// others); its FLOPs are this machine's times, which rank layouts and balance stages but say
// nothing of another machine, and its layers are whole (the planner splits them over no
// tensor-parallel group).
std::vector<LayerCost> measured_costs(const ModelConfig& config);

}  // namespace pipetrain::models
