#pragma once

#include <nlohmann/json.hpp>

#include <string>

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

}  // namespace pipetrain::optim
