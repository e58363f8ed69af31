#pragma once

#include <csignal>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/config/key_table.h"

namespace pipetrain::trainer {

// Keys of `pipetrain train` beside DeepSpeed's (docs/user/config.md).
// data.type: bytes of text files, token files, Megatron's indexed datasets, or synthetic
// features (the MLP). Spelled in data_kinds() and nowhere else.
enum class DataKind { kText, kTokens, kIndexed, kSynthetic };
const config::Names<DataKind>& data_kinds();

struct TrainerConfig {
  int64_t train_iters = 100;
  int64_t eval_interval = 50;  // 0: only at the end
  int64_t eval_iters = 4;
  int64_t save_interval = 0;     // 0: only at the end (when `save` is set)
  std::string save;              // checkpoint directory
  std::string load;              // resume from this directory's latest checkpoint
  bool overwrite = false;        // save over another run's checkpoints
  int save_on_signal = SIGTERM;  // saves a checkpoint and stops the job; 0: none
  bool async_save = false;       // checkpoint.async: written while training goes on
  struct Data {
    DataKind type = DataKind::kText;
    std::vector<std::string> paths{"/usr/share/common-licenses"};
    int64_t token_bytes = 2;
    double validation_fraction = 0.1;
    bool pack = false;          // packed documents: attention within each document
    int64_t document_end = -1;  // the id ending a document; -1: model.eos_token_id
  } data;
  struct Log {
    std::string metrics;      // JSON lines, one per step
    std::string csv;          // the same as CSV
    std::string tensorboard;  // folder for TensorBoard event files
    double peak_tflops = 0;   // per rank, for MFU; 0: a known GPU's, none on a CPU
  } log;
  struct Sample {
    std::string prompt = "The ";
    int64_t tokens = 200;  // 0: no sample at the end
    double temperature = 0.8;
    int64_t top_k = 20;
    std::string tokenizer;  // a SentencePiece .model; empty: bytes
  } sample;
  bool memory_breakdown = false;  // count CPU tensor memory per rank and report it
  std::string trace;              // Chrome/Perfetto trace of one step
  int64_t trace_step = 0;         // 0: the last step
};

// The keys of `pipetrain train` beside the engine's and the model's, each bound once.
const config::KeyTable<TrainerConfig>& trainer_keys();

// Reads the trainer's keys (InputError names a bad one); other keys are left alone.
TrainerConfig parse_trainer_config(const nlohmann::json& json);

}  // namespace pipetrain::trainer
