#include "rotary.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <numbers>

namespace pipetrain::models {
namespace {

// theta^(-2i / dim) for pairs i, in float32 as transformers computes it.
at::Tensor plain_frequencies(double theta, int64_t dim) {
  const at::Tensor pairs = at::arange(0, dim, 2, at::kLong).to(at::kFloat);
  return at::reciprocal(at::pow(theta, pairs / dim));
}

// NTK: the base grown with the sequence past max_positions (none below it).
at::Tensor dynamic_frequencies(const Rope& r, int64_t length) {
  const int64_t dim = r.head_dim;
  if (length <= r.max_positions) return plain_frequencies(r.theta, dim);
  const double factor = r.scaling.factor;
  // In float32, as transformers computes it from a tensor sequence length.
  const at::Tensor grown = at::scalar_tensor(static_cast<double>(length), at::kFloat) * factor /
                               static_cast<double>(r.max_positions) -
                           (factor - 1);
  const at::Tensor base = grown.pow(static_cast<double>(dim) / (dim - 2)) * r.theta;
  const at::Tensor pairs = at::arange(0, dim, 2, at::kLong).to(at::kFloat);
  return at::reciprocal(base.pow(pairs / dim));
}

// LLaMA 3.1: wavelengths past original / low_freq_factor divided by factor, those below
// original / high_freq_factor kept, a smooth blend between.
at::Tensor llama3_frequencies(const Rope& r) {
  const RopeScaling& s = r.scaling;
  const at::Tensor plain = plain_frequencies(r.theta, r.head_dim);
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelength = old_context / s.low_freq_factor;
  const double high_wavelength = old_context / s.high_freq_factor;
  const at::Tensor wavelength = 2 * std::numbers::pi / plain;
  at::Tensor scaled = at::where(wavelength > low_wavelength, plain / s.factor, plain);
  const at::Tensor smooth =
      (old_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium =
      at::logical_not(wavelength < high_wavelength) & at::logical_not(wavelength > low_wavelength);
  return at::where(medium, smoothed, scaled);
}

// YaRN: extrapolated (plain) frequencies for the dimensions that rotate often within the
// pretraining context, interpolated (divided by factor) for the slow ones, a linear ramp
// between.
at::Tensor yarn_frequencies(const Rope& r) {
  const RopeScaling& s = r.scaling;
  const int64_t dim = r.head_dim;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(r.theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const at::Tensor pairs = at::arange(0, dim, 2, at::kLong).to(at::kFloat);
  const at::Tensor position_frequencies = at::pow(r.theta, pairs / dim);
  const at::Tensor extrapolated = 1.0 / position_frequencies;
  const at::Tensor interpolated = 1.0 / (s.factor * position_frequencies);
  const at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  const at::Tensor kept = 1 - ramp;  // the extrapolated share
  return interpolated * (1 - kept) + extrapolated * kept;
}

double yarn_attention_factor(const RopeScaling& s) {
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

}  // namespace

Rope rope_of(const LlamaConfig& config, int64_t layer) {
  if (config.local_rotation(layer)) {  // Gemma's sliding blocks: their own base, unscaled
    return {.head_dim = config.head_width(),
            .theta = config.rope_local_base_freq,
            .max_positions = config.positions()};
  }
  return {.head_dim = config.head_width(),
          .theta = config.rope_theta,
          .scaling = config.rope_scaling,
          .max_positions = config.positions()};
}

Frequencies inverse_frequencies(const Rope& rope, int64_t length) {
  switch (rope.scaling.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      return {plain_frequencies(rope.theta, rope.head_dim) / rope.scaling.factor};
    case RopeType::kDynamic:
      return {dynamic_frequencies(rope, length)};
    case RopeType::kLlama3:
      return {llama3_frequencies(rope)};
    case RopeType::kYarn:
      return {yarn_frequencies(rope), yarn_attention_factor(rope.scaling)};
  }
  return {plain_frequencies(rope.theta, rope.head_dim)};
}

Rotation rotation(const at::Tensor& positions, const Rope& rope, const at::Tensor& like) {
  const auto f32 = like.options().dtype(at::kFloat);
  const int64_t length = rope.scaling.type == RopeType::kDynamic && positions.numel() > 0
                             ? positions.max().item<int64_t>() + 1
                             : 0;
  const Frequencies frequencies = inverse_frequencies(rope, length);
  at::Tensor angles = positions.to(f32).unsqueeze(-1) * frequencies.inverse.to(like.device());
  angles = at::cat({angles, angles}, -1);
  if (angles.dim() == 3) angles = angles.unsqueeze(1);  // over the heads
  at::Tensor cos = angles.cos(), sin = angles.sin();
  if (frequencies.attention_factor != 1.0) {
    cos = cos * frequencies.attention_factor;
    sin = sin * frequencies.attention_factor;
  }
  return {cos.to(like.scalar_type()), sin.to(like.scalar_type())};
}

at::Tensor rotate(const at::Tensor& x, const Rotation& r) {
  const auto halves = x.chunk(2, -1);
  return x * r.cos + at::cat({-halves[1], halves[0]}, -1) * r.sin;
}

}  // namespace pipetrain::models
