#pragma once

#include <cstdint>
#include <string>

namespace pipetrain::models {

// The MLP's sizes (see mlp_layers()).
struct MlpConfig {
  int64_t inputs = 16;
  int64_t hidden = 64;
  int64_t outputs = 1;
  int64_t layers = 4;               // linear layers; ReLU between them
  std::string task = "regression";  // or "classification"
};

}  // namespace pipetrain::models
