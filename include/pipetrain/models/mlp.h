#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::models {

struct MlpConfig {
  int64_t inputs = 16;
  int64_t hidden = 64;
  int64_t outputs = 1;
  int64_t layers = 4;               // linear layers; ReLU between them
  std::string task = "regression";  // or "classification"
};

// Linear layers (type "Linear") with ReLU function layers between them.
std::vector<LayerSpec> mlp_layers(const MlpConfig& config);

// Mean squared error (regression) or cross-entropy over `outputs` classes.
LossFunction mlp_loss(const MlpConfig& config);

}  // namespace pipetrain::models
