#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/models/model_config.h"
#include "pipetrain/module/lora_config.h"
#include "pipetrain/topology/parallel_layout.h"
#include "trainer/objectives/objective_config.h"
#include "trainer/trainer_config.h"

namespace pipetrain::trainer {

// Everything `pipetrain train` reads from its config file: the engine's keys, the model's
// and the trainer's, parsed once.
struct JobConfig {
  engine::TrainingConfig engine;
  models::ModelConfig model;
  TrainerConfig trainer;
  module::LoraConfig lora;
  ObjectiveConfig objective;
  // The parallel axes the keys ask for (topology::layout_keys; data 0: what the job's
  // ranks leave, see topology::resolve_layout): their one store.
  topology::ParallelLayout layout{.data = 0};
};

// Sets the keys that hold `layout`'s axes in a config before it is read (what
// JobConfig::layout reads back): pipeline.stages and .chunks, data_parallel, model_parallel,
// context_parallel, expert_parallel, sequence_parallel.
void set_layout_keys(nlohmann::json& config, const topology::ParallelLayout& layout);

// Every key of a job, each bound once by its owner (the engine, the model, the trainer).
const config::KeyTable<JobConfig>& job_keys();

// Reads every key (InputError names a bad one); the keys no owner knows go to `unknown`.
// DeepSpeed's `bfloat16` and `tensorboard` sections are read as DeepSpeed reads them.
JobConfig parse_job_config(const nlohmann::json& json, std::vector<std::string>* unknown);

// A user's lora section that asks for adapters in all but rank, which would train every
// weight: InputError. Without rank, any key; with rank 0, keys other than their defaults.
// For the user's own file (train, plan), not a checkpoint's effective config.
void check_lora_section(const nlohmann::json& json);

// InputError naming every key of `unknown` in one message, each with the known key it most
// likely misspells, or the DeepSpeed section it is and what pipetrain reads instead. Every
// command refuses them: a key left unread would leave a run training other than asked.
void refuse_unknown_keys(const std::vector<std::string>& unknown);

// Command-line settings that win over the file.
struct TrainerOverrides {
  std::optional<int64_t> pipe{}, data{}, model{}, context{}, expert{}, micro_batches{},
      train_iters{}, eval_interval{}, seed{}, chunks{}, zero{};
  bool overwrite = false;          // --overwrite: sets overwrite
  bool sequence_parallel = false;  // --sequence-parallel: sets sequence_parallel
  std::optional<double> lr{};
  std::optional<std::string> save{}, load{}, trace{}, schedule{}, device{};
};

// The config file with the overrides written into it, each under its key in job_keys():
// the effective config, read next like any file.
nlohmann::json apply_overrides(nlohmann::json config, const TrainerOverrides& overrides);

// Markdown rows, one per key: | `key` | type | default | meaning |.
std::string key_table_markdown();

}  // namespace pipetrain::trainer
