#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// How to draw each next token: from the top-k of the softmax at `temperature` (0: greedy;
// top_k 0: all tokens), with a generator seeded by `seed`.
struct SamplingOptions {
  double temperature = 0.8;
  int64_t top_k = 20;
  uint64_t seed = 1;
};

// Samples `count` tokens after `prompt` through the pipeline (the inference schedule, one
// micro-batch per token, at most `context` tokens of history), the last stage drawing.
// Collective over the pipe; every stage returns the whole sequence.
std::vector<int64_t> sample_tokens(engine::PipelineEngine& engine, std::vector<int64_t> prompt,
                                   int64_t count, const SamplingOptions& options, int64_t context);

}  // namespace pipetrain::trainer
