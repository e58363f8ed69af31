#include "pipetrain/trainer/sampling.h"

#include <ATen/ATen.h>

#include <limits>

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
  return at::multinomial(at::softmax(logits, 0), 1, false, generator);
}

}  // namespace

std::vector<int64_t> sample_tokens(engine::PipelineEngine& engine, std::vector<int64_t> tokens,
                                   int64_t count, const SamplingOptions& options, int64_t context) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const topology::Grid& grid = engine.grid();
  const at::NoGradGuard no_grad;  // nothing cached may hold a graph
  models::KvCache cache;
  for (int64_t i = 0; i < count; ++i) {
    const auto size = static_cast<int64_t>(tokens.size());
    // What to feed: the tokens the cache lacks while the sequence fits the context, else
    // the whole (sliding) window afresh.
    if (!options.kv_cache || size > context) cache.clear();
    const int64_t first = size > context ? size - context : cache.length();
    const at::Tensor feed =
        at::tensor(std::vector<int64_t>(tokens.begin() + first, tokens.end()), at::kLong)
            .unsqueeze(0);
    comm::TensorList outputs;
    if (options.kv_cache) {
      const models::UsingKvCache using_cache(cache);
      outputs = engine.infer({feed});
      cache.advance(feed.size(1));
    } else {
      outputs = engine.infer({feed});
    }
    at::Tensor next = at::zeros({1}, at::kLong);
    if (grid.is_last_stage()) {
      // The last position's logits, whole again from the tensor-parallel vocabulary slices.
      const at::Tensor logits = tensor_parallel::gather_from_group(
          outputs.at(0)[0][-1], tensor_parallel::Group{grid.model_comm()});
      next = draw(logits.to(at::kDouble), options, generator);
    }
    grid.pipe_comm()->broadcast(next, grid.pipe_parallel_size() - 1);
    tokens.push_back(next.item<int64_t>());
  }
  return tokens;
}

}  // namespace pipetrain::trainer
