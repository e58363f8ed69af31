#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/models/layer_cost.h"
#include "pipetrain/models/model_config.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/module/recompute.h"

namespace pipetrain::planner {

using models::LayerCost;

// The layers of a model, in the order its build makes them: its family row's costs. Throws
// InputError for a model the planner cannot cost (the MLP, a program's family without costs).
std::vector<LayerCost> layer_costs(const models::ModelConfig& config);

// Under `lora` (enabled): every layer of `layers` (the costs of `config`) frozen, the
// adapters of the linears it targets in the blocks it chooses counted.
void add_adapters(std::vector<LayerCost>& layers, const models::ModelConfig& config,
                  const module::LoraConfig& lora);

}  // namespace pipetrain::planner
