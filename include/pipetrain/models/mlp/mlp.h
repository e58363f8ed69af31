#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/models/mlp/mlp_config.h"
#include "pipetrain/module/layer.h"
#include "pipetrain/module/pipeline_module.h"

namespace pipetrain::models {

// Linear layers (type "Linear") with ReLU function layers between them.
std::vector<module::LayerSpec> mlp_layers(const MlpConfig& config);

// Mean squared error (regression) or cross-entropy over `outputs` classes.
module::LossFunction mlp_loss(const MlpConfig& config);

}  // namespace pipetrain::models
