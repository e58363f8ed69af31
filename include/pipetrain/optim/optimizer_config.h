#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/optim/precision.h"

namespace pipetrain::optim {

// DeepSpeed's `optimizer` section. `params` keep DeepSpeed's names and are read (and
// checked) by make_optimizer().
struct OptimizerConfig {
  std::string type = "Adam";  // Adam, AdamW or SGD
  nlohmann::json params = nlohmann::json::object();
};

// DeepSpeed's `scheduler` section, read by make_lr_schedule().
struct SchedulerConfig {
  std::string type;  // empty (constant), WarmupLR, WarmupDecayLR or WarmupCosineLR
  nlohmann::json params = nlohmann::json::object();
};

// The `optimizer` and `scheduler` sections' keys, which the engine's table takes in
// (engine::training_keys).
const config::KeyTable<OptimizerConfig>& optimizer_keys();
const config::KeyTable<SchedulerConfig>& scheduler_keys();

// What the optimizer step reads of a job's config (engine::TrainingConfig::step()).
struct StepConfig {
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  PrecisionConfig precision;
  double gradient_clipping = 0.0;  // max global norm; 0: off
  // Parameters weight decay leaves alone (see WeightDecayRule).
  std::vector<std::string> weight_decay_exempt{"auto"};
};

}  // namespace pipetrain::optim
