#include "pipetrain/trainer/sampling.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <limits>

#include "pipetrain/context_parallel/whole_sequences.h"
#include "pipetrain/models/kv_cache.h"
#include "pipetrain/tensor_parallel/collectives.h"

namespace pipetrain::trainer {
namespace {

// The next token from the last position's logits (whole, double precision).
at::Tensor draw(at::Tensor logits, const SamplingOptions& options, at::Generator& generator) {
  if (options.temperature == 0) return logits.argmax().reshape({1});
  logits = logits / options.temperature;
  if (options.top_k > 0 && options.top_k < logits.numel()) {
    const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
  }
  at::Tensor probabilities = at::softmax(logits, 0);
  if (options.top_p < 1) {
    // The likeliest tokens until their sum reaches top_p (at least one), as transformers'.
    const auto [sorted, order] = probabilities.sort(/*dim=*/0, /*descending=*/true);
    const at::Tensor before = sorted.cumsum(0) - sorted;  // the mass ahead of each token
    probabilities = at::zeros_like(probabilities)
                        .scatter(0, order, sorted.masked_fill(before >= options.top_p, 0));
  }
  return at::multinomial(probabilities, 1, false, generator);
}

// One prompt's generation: its tokens, its cache, its own generator (seeded alike, so a
// prompt draws what it would alone).
struct Sequence {
  std::vector<int64_t> tokens;
  int64_t left = 0;           // new tokens still to draw
  std::vector<int64_t> stop;  // its own and the options' stop tokens
  models::KvCache cache;
  at::Generator generator;
};

// What `sequence` feeds next: the tokens its cache lacks while the sequence fits the
// context, else the whole (sliding) window afresh.
at::Tensor next_feed(Sequence& sequence, const SamplingOptions& options, int64_t context) {
  const auto size = static_cast<int64_t>(sequence.tokens.size());
  if (!options.kv_cache || size > context) sequence.cache.clear();
  const int64_t first = size > context ? size - context : sequence.cache.length();
  return at::tensor(std::vector<int64_t>(sequence.tokens.begin() + first, sequence.tokens.end()),
                    at::kLong)
      .unsqueeze(0);
}

}  // namespace

std::vector<std::vector<int64_t>> sample_in_flight(engine::PipelineEngine& engine,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   int64_t count, const SamplingOptions& options,
                                                   int64_t context) {
  std::vector<PromptRequest> requests;
  for (const auto& prompt : prompts)
    requests.push_back({.tokens = prompt, .max_new_tokens = count});
  return sample_in_flight(engine, requests, options, context);
}

std::vector<std::vector<int64_t>> sample_in_flight(engine::PipelineEngine& engine,
                                                   const std::vector<PromptRequest>& prompts,
                                                   const SamplingOptions& options,
                                                   int64_t context) {
  const topology::Grid& grid = engine.grid();
  // Nothing cached may hold a graph, and no tensor made here is one autograd will see: no
  // version counters or autograd metadata on the many small tensors of a decode step.
  const c10::InferenceMode inference;
  // A decode step feeds one position: the sequence cannot split over a tensor-parallel group.
  const context_parallel::WholeSequences whole_sequences;
  std::vector<Sequence> sequences(prompts.size());
  if (options.max_in_flight < 1) throw std::invalid_argument("max_in_flight must be at least 1");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    sequences[p].tokens = prompts[p].tokens;
    sequences[p].left = prompts[p].max_new_tokens;
    sequences[p].stop = prompts[p].stop;
    sequences[p].stop.insert(sequences[p].stop.end(), options.stop.begin(), options.stop.end());
    sequences[p].generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  }
  while (true) {
    std::vector<Sequence*> active;  // the first max_in_flight unfinished, in prompt order
    for (auto& sequence : sequences) {
      if (sequence.left > 0 && static_cast<int64_t>(active.size()) < options.max_in_flight)
        active.push_back(&sequence);
    }
    if (active.empty()) break;
    std::vector<module::Activation> feeds;
    for (Sequence* sequence : active) feeds.push_back({next_feed(*sequence, options, context)});
    std::vector<module::Activation> outputs;
    {
      models::UsingKvCache using_cache(nullptr);
      outputs = engine.infer_each(feeds, [&](int k) {
        using_cache.activate(options.kv_cache ? &active.at(k)->cache : nullptr);
      });
    }
    at::Tensor next = at::zeros({static_cast<int64_t>(active.size())}, at::kLong);
    for (std::size_t k = 0; k < active.size(); ++k) {
      if (options.kv_cache) active[k]->cache.advance(feeds[k][0].size(1));
      if (!engine.holds_output()) continue;
      // The last position's logits, whole again from the tensor-parallel vocabulary slices.
      const at::Tensor logits = tensor_parallel::gather_from_group(
          outputs.at(k).at(0)[0][-1], tensor_parallel::Group{grid.model_comm()});  // last position
      next[k] = draw(logits.to(at::kDouble), options, active[k]->generator).item<int64_t>();
    }
    grid.pipe_comm()->broadcast(next, engine.output_stage());
    for (std::size_t k = 0; k < active.size(); ++k) {
      const int64_t token = next[k].item<int64_t>();
      active[k]->tokens.push_back(token);
      const auto& stop = active[k]->stop;
      const bool stops = std::find(stop.begin(), stop.end(), token) != stop.end();
      active[k]->left = stops ? 0 : active[k]->left - 1;
    }
  }
  std::vector<std::vector<int64_t>> texts;
  for (auto& sequence : sequences) texts.push_back(std::move(sequence.tokens));
  return texts;
}

std::vector<int64_t> sample_tokens(engine::PipelineEngine& engine, std::vector<int64_t> prompt,
                                   int64_t count, const SamplingOptions& options, int64_t context) {
  return sample_in_flight(engine, {std::move(prompt)}, count, options, context).front();
}

}  // namespace pipetrain::trainer
