#pragma once

#include <cstdint>

namespace pipetrain::tensor_parallel {

// A label that counts in no loss: a prompt's token in supervised fine-tuning, padding
// (transformers' and PyTorch's -100).
constexpr int64_t kIgnoreIndex = -100;

// How a loss over tokens is reduced: the mean over the tokens that count, their sum (what a
// mean over a whole batch of unequal counts is built from), or none (each token's loss, shaped
// as the labels, 0 where a label does not count: minus its log-probability).
enum class TokenReduction { kMean, kSum, kNone };

}  // namespace pipetrain::tensor_parallel
