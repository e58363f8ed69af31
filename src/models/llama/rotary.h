#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "pipetrain/models/llama/llama_config.h"

// Rotary position embeddings as transformers computes them, for every rope_type
// pipetrain builds (llama_config.h).
namespace pipetrain::models {

// What decides a position's rotation.
struct Rope {
  int64_t head_dim = 0;
  double theta = 10000.0;
  RopeScaling scaling{};
  int64_t max_positions = 0;  // max_position_embeddings, which `dynamic` grows past
  bool operator==(const Rope&) const = default;
};
// Block `layer`'s rotation (Gemma's sliding blocks have their own; -1: the global one).
Rope rope_of(const LlamaConfig& config, int64_t layer = -1);

// cos and sin of each position's angles, [seq, head_dim] (or [batch, 1, seq, head_dim]
// for positions [batch, seq]), in `like`'s type and device: the angle of position p in pair
// i is p times the pair's inverse frequency, the two halves of a head rotated together
// (transformers' rotate_half layout), both scaled by the rope type's attention factor.
struct Rotation {
  at::Tensor cos;
  at::Tensor sin;
};
// `positions`: int64 [seq] or [batch, seq]. `dynamic` reads the longest sequence from
// them (the largest position + 1), as transformers does for a fresh model.
Rotation rotation(const at::Tensor& positions, const Rope& rope, const at::Tensor& like);

// x [batch, heads, seq, head_dim] rotated.
at::Tensor rotate(const at::Tensor& x, const Rotation& r);

// The inverse frequencies [head_dim / 2] (float32) and the factor cos and sin are scaled
// by, for sequences of `length` positions (read by `dynamic` only).
struct Frequencies {
  at::Tensor inverse;
  double attention_factor = 1.0;
};
Frequencies inverse_frequencies(const Rope& rope, int64_t length);

}  // namespace pipetrain::models
