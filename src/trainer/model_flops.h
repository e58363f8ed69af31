#pragma once

#include <string>

#include "pipetrain/models/model_config.h"

namespace pipetrain::trainer {

// Model FLOPs of one sample's forward and backward: the planner's count of the model's
// layers (its family row's costs; multiply-adds count two; recomputation is not counted,
// as MFU counts it), or 0 for a model the planner cannot count (the MLP, a program's
// family without costs).
double model_flops_per_sample(const models::ModelConfig& config);

// A GPU's dense peak FLOP/s in bf16/fp16 (`half_precision`) or fp32, by its product name,
// as the planner's clusters/ files give them (H100, H200, A100); 0 for one not known.
double known_peak_flops(const std::string& gpu_name, bool half_precision);

// Model FLOP utilisation: `flops` done in `seconds` by `devices` of `peak` FLOP/s each,
// as a fraction; 0 when the peak or the FLOPs are unknown.
inline double model_flop_utilisation(double flops, double seconds, int devices, double peak) {
  return flops > 0 && peak > 0 && seconds > 0 ? flops / seconds / (devices * peak) : 0.0;
}

}  // namespace pipetrain::trainer
