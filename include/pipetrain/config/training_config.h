#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/config/config_section.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/optim/loss_scaler.h"

namespace pipetrain {

// The DeepSpeed-style keys pipetrain reads. `params` keep DeepSpeed's names and are read
// (and checked) by the optimizer and LR schedule factories.
struct OptimizerConfig {
  std::string type = "Adam";  // Adam, AdamW or SGD
  nlohmann::json params = nlohmann::json::object();
};

struct SchedulerConfig {
  std::string type;  // empty (constant), WarmupLR, WarmupDecayLR or WarmupCosineLR
  nlohmann::json params = nlohmann::json::object();
};

struct PipelineConfig {
  int64_t stages = 1;
  std::string partition_method = "parameters";
  int64_t activation_checkpoint_interval = 0;
  bool seed_layers = true;  // per-layer seeds (always on; kept for DeepSpeed configs)
  std::string schedule = "train";
  // With tensor parallelism: each rank of a group sends only its 1/size share of an
  // activation or gradient to the next (previous) stage, which all-gathers the shares.
  bool partitioned_transfers = true;
};

// Mixed precision: the model (and what travels between stages) in bf16 or fp16, fp32
// master weights and optimizer state; fp16 adds loss scaling.
struct PrecisionConfig {
  // fp32, bf16 (bf16.enabled) or fp16 (fp16.enabled)
  std::string dtype = "fp32";
  // The data-parallel gradient all-reduce: fp32 or the model's type.
  std::string communication_data_type = "fp32";
  LossScalerConfig loss_scaler;  // fp16 only
};

struct TrainingConfig {
  // Batch arithmetic: train_batch_size = micro batch * accumulation steps * data-parallel size.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  double gradient_clipping = 0.0;  // max global norm; 0: off
  int64_t seed = 1234;
  double comm_timeout = 0;                  // seconds; 0: PIPETRAIN_COMM_TIMEOUT or 300
  int64_t reduce_bucket_size = 25'000'000;  // elements per data-parallel all-reduce bucket
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  PipelineConfig pipeline;
  PrecisionConfig precision;
  models::ModelConfig model;
  std::vector<std::string> unknown_keys;  // for a warning, one per key
};

// Reads every section, checking types; InputError names the key. Batch sizes are left
// as given: resolve them with resolve_batch() once the data-parallel size is known.
// `extra_keys`: top-level keys another reader (e.g. the trainer) owns, not to be warned about.
TrainingConfig parse_training_config(const nlohmann::json& json,
                                     const std::vector<std::string>& extra_keys = {});

// Fills in whichever of train_batch_size, micro batch size and accumulation steps is
// missing, given at least two (or the micro batch size alone: one step). Throws
// InputError showing the arithmetic if they disagree or do not divide.
void resolve_batch(TrainingConfig& config, int64_t data_parallel_size);

}  // namespace pipetrain
