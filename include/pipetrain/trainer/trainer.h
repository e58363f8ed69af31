#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"
#include "pipetrain/trainer/trainer_config.h"

namespace pipetrain {

// `pipetrain train`, run on every rank (inside run_rank): builds the grid, the model, the
// data and the engine from the effective config, trains for train_iters steps with
// evaluation, checkpoints, logs and a final sample. Returns the exit code.
int train(const nlohmann::json& effective_config);

// `pipetrain eval`: the validation loss of a checkpoint, printed by rank 0.
int evaluate_checkpoint(const std::string& checkpoint, int64_t eval_iters);

// `pipetrain generate`: text sampled from a checkpoint's GPT, printed by rank 0.
struct GenerateOptions {
  std::string checkpoint;
  std::string prompt = "The ";
  int64_t tokens = 100;
  double temperature = 0.8;
  int64_t top_k = 20;
  uint64_t seed = 1;
};
int generate_from_checkpoint(const GenerateOptions& options);

// Samples `count` tokens after `prompt` through the pipeline (the inference schedule, one
// micro-batch per token), the last stage drawing from the top-k of the softmax at
// `temperature` (0: greedy) with a generator seeded by `seed`. Collective over the pipe;
// every stage returns the whole sequence.
std::vector<int64_t> sample_tokens(PipelineEngine& engine, std::vector<int64_t> prompt,
                                   int64_t count, double temperature, int64_t top_k, uint64_t seed,
                                   int64_t context);

}  // namespace pipetrain
