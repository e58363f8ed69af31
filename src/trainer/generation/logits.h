#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipetrain::trainer {

// `pipetrain logits`: what a checkpoint's (latest) language model predicts at every position of a
// token sequence, computed through the pipeline (ranks / (model_parallel x expert_parallel)
// stages; with experts split over expert_parallel ranks, that many replicas run the
// sequence) and written by one rank as a safetensors file holding "logits", float32
// [tokens, vocab_size].
struct LogitsOptions {
  std::string checkpoint;
  std::vector<int64_t> tokens;
  int tensor_parallel = 1;
  int expert_parallel = 1;
  std::string out;
};
int write_logits(const LogitsOptions& options);

}  // namespace pipetrain::trainer
