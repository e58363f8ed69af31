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
//   - activations kept for backward (the tensors its forward leaves held, its output among
//     them) and the gradients in flight during its backward (the most held beyond what
//     backward starts with), as the difference between the two micro-batches, so that what
//     does not grow with the batch (weights, their gradients) drops out;
//   - the last layer with the loss: what the loss keeps, in float32 as the engine computes it;
//   - FLOPs: its measured forward and backward times, as this machine's float32 matrix
//     products of the layer's width compute in that time (so that a cluster file calibrated
//     here predicts those times).
// Its memory follows the family's real tensors; its FLOPs are this machine's times, which
// rank layouts and balance stages but say nothing of another machine.
std::vector<LayerCost> measured_costs(const ModelConfig& config);

}  // namespace pipetrain::models
