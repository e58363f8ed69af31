#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// How to draw each next token: from the top-k of the softmax at `temperature` (0: greedy;
// top_k 0: all tokens), then from the fewest likeliest tokens whose probabilities reach
// top_p (1: all), with a generator seeded by `seed`. A drawn token of `stop` ends its
// sequence (it is kept).
struct SamplingOptions {
  double temperature = 0.8;
  int64_t top_k = 20;
  uint64_t seed = 1;
  double top_p = 1.0;
  std::vector<int64_t> stop{};
  // Keys and values of earlier positions kept per stage (models::KvCache): the prompt runs
  // once, then one token per step. Without, every step runs the whole window again. Only
  // for models whose attention reads models::active_kv_rows() (the built-in GPT and
  // LLaMA), each row of the activations over its own cache: another model would attend
  // over the new tokens alone.
  bool kv_cache = false;
  // Prompts in flight at once in sample_in_flight (the rest wait their turn): each holds
  // its cache and its micro-batch's outputs.
  int64_t max_in_flight = 16;
};

// Samples `count` tokens after `prompt` through the pipeline (the inference schedule, one
// micro-batch per token, at most `context` tokens of history), the last stage drawing.
// With the KV cache each step feeds only the tokens not yet cached while the sequence fits
// the context; past it the window slides, every position moves, and each step runs the
// whole window as without a cache. Collective over the pipe; every stage returns the whole
// sequence.
std::vector<int64_t> sample_tokens(engine::PipelineEngine& engine, std::vector<int64_t> prompt,
                                   int64_t count, const SamplingOptions& options, int64_t context);

// sample_tokens for several prompts at once, in flight. With the cache, prompts that feed as
// many positions share micro-batches (a row each, over its own cache), in as many groups as
// the pipe has stages, so stage s works on one group while stage s + 1 works on the one
// before; without, each prompt is a micro-batch of its own. Up to 16 rounds run as one
// streamed inference (engine.infer_streamed): the last stage sends each drawn token to the
// first, which feeds it a round later. Each prompt keeps its own generator seeded with
// `options.seed`, so it draws the tokens it would alone (up to the rounding of batched
// matrix shapes). Returns each prompt's whole sequence, in order. Collective over the pipe.
std::vector<std::vector<int64_t>> sample_in_flight(engine::PipelineEngine& engine,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   int64_t count, const SamplingOptions& options,
                                                   int64_t context);

// One prompt of sample_in_flight with its own bounds: at most `max_new_tokens` new tokens,
// ending early at a token of `stop` (besides the options' stop tokens).
// `seed`, when given, seeds its generator instead of the options' (samples of one prompt
// that should differ).
struct PromptRequest {
  std::vector<int64_t> tokens;
  int64_t max_new_tokens = 0;
  std::vector<int64_t> stop{};
  std::optional<uint64_t> seed{};
};
// With `logprobs`, each prompt's new tokens' log-probabilities under the model's softmax at
// the temperature (1 when greedy), before top-k and top-p, on every stage.
std::vector<std::vector<int64_t>> sample_in_flight(
    engine::PipelineEngine& engine, const std::vector<PromptRequest>& prompts,
    const SamplingOptions& options, int64_t context,
    std::vector<std::vector<double>>* logprobs = nullptr);

}  // namespace pipetrain::trainer
