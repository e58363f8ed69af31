#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/engine/micro_batch_source.h"
#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/models/builtin_model.h"
#include "pipetrain/topology/grid.h"
#include "trainer/job_config.h"
#include "trainer/objectives/objective_statistics.h"

namespace pipetrain::trainer {

// Everything one rank of a `pipetrain train` (eval, generate) job needs. The one place
// that turns a config into a running job; built-in models are known here only through
// what they describe of themselves (models::BuiltinModel).
struct Job {
  JobConfig config;
  nlohmann::json effective;  // every key with its value, batch sizes resolved
  models::BuiltinModel model;
  std::shared_ptr<topology::Grid> grid;
  std::shared_ptr<groups::Communicators> comms;  // every communicator, made once
  std::shared_ptr<module::PipelineModule> module;
  std::unique_ptr<engine::PipelineEngine> engine;
  std::unique_ptr<engine::MicroBatchSource> train_data;
  std::unique_ptr<engine::MicroBatchSource> validation_data;
  nlohmann::json validation_start;  // the validation source's state before any draw
  std::string data_summary;         // a line on what the data holds, where it says more
  std::string lora_summary;         // a line on LoRA's adapters, with lora.rank set
  // With an objective other than the language model's: what its loss saw of each step, for
  // its metrics (TRL's for DPO).
  std::shared_ptr<ObjectiveStatistics> objective_statistics;
};

// Whether a job reads its training and validation data (forward-only uses do not).
enum class DataUse { kRead, kNone };

// Collective over the MPI world: parses `file` once (unknown keys refused),
// builds the grid, this stage's part of the model, the engine and the data. With
// `trusted_from`, a checkpoint the config was read from (see config_of_checkpoint), the
// model's layers are first checked to have the parameter counts the checkpoint's files
// hold, so that a config edited in a manifest allocates nothing the files could not fill.
// With DataUse::kNone the data sources stay null (the data keys are still read). `ranks`
// are the job's ranks: by default the MPI world (a part of it runs a job of its own, as
// pipetrain.from_pretrained's import on one rank of a script's several).
Job build_job(const nlohmann::json& file, const std::string& trusted_from = {},
              DataUse data = DataUse::kRead,
              std::shared_ptr<comm::MpiCommunicator> ranks = nullptr);

// Each rank's peak FLOP/s for MFU: log.peak_tflops, else its GPU's if known, else 0.
double peak_flops(const Job& job);

// Collective: the mean loss over eval_iters validation batches, the same ones every time.
double validation_loss(Job& job);

// The training config a checkpoint holds (InputError if none), without the keys earlier
// versions wrote and this one refuses, so older checkpoints still evaluate and sample.
nlohmann::json saved_config(const std::string& checkpoint);

// For a config that loads a checkpoint (`load`): without a model section it takes the
// checkpoint's (`taken` then says so), so a fine-tune needs only its own training keys (and,
// for token data without a sample.tokenizer, the checkpoint's tokenizer);
// the keys a model section gives must be the checkpoint's, `model.dropout` aside (InputError
// naming the first that differs), and the rest come from the checkpoint. Other configs
// come back as they are.
nlohmann::json with_model_of_checkpoint(nlohmann::json config, bool* taken = nullptr);

// The layout of a forward-only job of `ranks` ranks: tensor-parallel groups of `tensor`,
// experts split over `experts` data-parallel replicas each running the same input (1: one
// pipeline), the rest pipeline stages; whole sequences, no chunks. InputError (naming
// --model or --expert-parallel) when the sizes do not divide the ranks.
topology::ParallelLayout forward_layout(int ranks, int tensor, int experts = 1);

// The config a checkpoint was trained with, laid out as `layout` over its ranks (its layout
// keys set through the job's table, set_layout_keys; layers are whole in a checkpoint, so
// any layout of the model's sizes takes it) running micro-batches of `micro_batch` samples,
// one per step, with the default schedule.
nlohmann::json config_of_checkpoint(const std::string& checkpoint, int64_t micro_batch,
                                    const topology::ParallelLayout& layout);

}  // namespace pipetrain::trainer
