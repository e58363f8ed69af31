#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/examples.h"

namespace pipetrain::trainer {

struct Job;

// `pipetrain logprobs`: each token's log-probability under a checkpoint's (latest) language
// model, given the tokens before it in its example, for every example of prepared data
// (indexed datasets with loss masks: prepare-data --chat). Computed through the pipeline
// (ranks / (model_parallel x expert_parallel) stages, tensor parallelism over model_parallel
// ranks, a mixture's experts over expert_parallel replicas), in float32
// from the whole vocabulary's logits, and written by one rank as a safetensors file:
//   "logprobs"  float32 [tokens]       log p(token t | the example's tokens before t); 0 at
//                                       each example's first token
//   "mask"      uint8   [tokens]       1 where the loss counts the token (a completion's), 0
//                                       elsewhere and at each example's first token
//   "offsets"   int64   [examples + 1] where each example starts in the two above
//   "sequence_logprobs" float64 [examples]  each example's sum of logprobs where mask is 1
// Examples are in the data's order (every prefix's documents, one after another), micro_batch
// at a time padded to the longest (one at a time for a mixture of experts, whose expert
// capacity the padding would change). An example longer than the model's context + 1 tokens
// is refused, naming it.
struct LogprobsOptions {
  std::string checkpoint;
  std::vector<std::string> data;  // indexed dataset prefixes, each with its PREFIX.mask
  int tensor_parallel = 1;
  // A mixture of experts' experts split over this many ranks: as many replicas run the same
  // examples (1: one pipeline).
  int expert_parallel = 1;
  int64_t micro_batch = 4;  // examples per forward pass
  std::string out;
};
int write_logprobs(const LogprobsOptions& options);

// What `logprobs` computes of examples, as the file holds it.
struct ExampleScores {
  std::vector<float> logprobs;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets{0};
  std::vector<double> sums;  // sequence_logprobs
};

// Collective over `job`'s ranks (a forward-only job with its checkpoint loaded, as
// `logprobs` builds it): every example's scores, filled on the one rank for which
// scores_here(job) is true, empty elsewhere. InputError naming an example longer than the
// model's context + 1 tokens.
ExampleScores score_examples(Job& job, const data::ExampleList& examples, int64_t micro_batch);
bool scores_here(const Job& job);

}  // namespace pipetrain::trainer
