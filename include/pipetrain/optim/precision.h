#pragma once

#include "pipetrain/config/key_table.h"
#include "pipetrain/optim/loss_scaler.h"

namespace pipetrain::optim {

// The model's floating-point type (and so that of what travels between stages).
enum class Precision { kFp32, kBf16, kFp16 };

// Mixed precision: the model in bf16 or fp16, fp32 master weights and optimizer state;
// fp16 adds loss scaling.
struct PrecisionConfig {
  Precision dtype = Precision::kFp32;  // bf16.enabled or fp16.enabled
  // The data-parallel gradient all-reduce: fp32 or the model's type.
  Precision communication_dtype = Precision::kFp32;
  LossScalerConfig loss_scaler;  // fp16 only
};

// The types' spellings (fp32, bf16, fp16) and the precision's keys (`bf16`, `fp16`,
// `communication_data_type`), which the engine's table takes in (engine::training_keys).
const config::Names<Precision>& precisions();
const config::KeyTable<PrecisionConfig>& precision_keys();

}  // namespace pipetrain::optim
