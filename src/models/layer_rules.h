#pragma once
// What the built-in language models share: the rules their sizes obey (InputError naming
// the `model.` key) and the LM head that computes through a tied token embedding.

#include <cstdint>
#include <cstdio>
#include <string>

#include "autograd/linear.h"
#include "pipetrain/context_parallel/ring_attention.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/module/layer.h"
#include "pipetrain/tensor_parallel/group.h"
#include "tensor_parallel/sequence_parallel.h"

namespace pipetrain::models {

// The standard deviation of the models' normal initialisation: GPT-2's, and transformers'
// initializer_range.
inline constexpr double kInitStd = 0.02;

// Bounds on the sizes of the built-in models, far past any trained model: every count of
// elements, parameters and FLOPs derived from them stays well inside 64 bits.
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;  // vocab_size, context
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;   // d_model, intermediate_size, heads
inline constexpr int64_t kMaxExperts = 4096;
inline constexpr double kMaxParameters = 1e15;  // 2^50: 500 times the largest trained model

// "model.KEY must be at least 1, got V", or "must be at most MOST, got V".
inline void require_size(int64_t value, const std::string& key, int64_t most) {
  if (value < 1)
    throw io::InputError("model." + key + " must be at least 1, got " + std::to_string(value));
  if (value > most) {
    throw io::InputError("model." + key + " must be at most " + std::to_string(most) + ", got " +
                         std::to_string(value));
  }
}

// A whole model's parameters, counted in floating point from sizes within the bounds
// above, must stay countable.
inline void require_countable(double parameters) {
  if (parameters > kMaxParameters) {
    char text[96];
    std::snprintf(text, sizeof text, "%.3g parameters", parameters);
    throw io::InputError("model: its sizes give " + std::string(text) +
                         ", more than the 1e15 pipetrain builds");
  }
}

// "model.KEY (V) must be divisible by WHAT (BY)".
inline void require_divisible(int64_t value, const std::string& key, int64_t by,
                              const std::string& what) {
  if (value % by != 0) {
    throw io::InputError("model." + key + " (" + std::to_string(value) + ") must be divisible by " +
                         what + " (" + std::to_string(by) + ")");
  }
}

// The logits of this rank's vocabulary slice through the token embedding of a tied
// embedding module (`Embedding::tokens`), for the whole sequence; the loss never gathers
// them.
template <typename Embedding>
module::LayerSpec tied_head(module::LayerSpec embedding, std::string type,
                            const tensor_parallel::Group& group) {
  embedding.type = std::move(type);
  embedding.tied_forward = [group](torch::nn::Module& module, const module::Activation& x) {
    const auto& tokens = static_cast<Embedding&>(module).tokens->weight;
    return module::Activation{tensor_parallel::column_parallel_linear(x.at(0), tokens, {}, group)};
  };
  return embedding;
}

// Under context parallelism the window must cut into 2 x its size equal chunks, and under
// sequence parallelism each rank's part of it must split evenly over the model group.
inline void require_sequence_split(int64_t context, const tensor_parallel::Group& group,
                                   const context_parallel::Group& context_group) {
  if (context_group.parallel())
    require_divisible(context, "context", 2 * int64_t{context_group.size()},
                      "2 x context_parallel");
  const int64_t mine = context / context_group.size();
  if (group.sequence_parallel && group.parallel()) {
    require_divisible(mine, context_group.parallel() ? "context / context_parallel" : "context",
                      group.size(), "the model-parallel size under sequence_parallel");
  }
}

}  // namespace pipetrain::models
