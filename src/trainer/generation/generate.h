#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pipetrain::trainer {

// `pipetrain generate`: text sampled from a checkpoint's language model, printed by rank 0.
struct GenerateOptions {
  std::string checkpoint;
  // To continue (in flight unless in_flight is false); none given (nor a prompts_file): "The ".
  std::vector<std::string> prompts;
  std::string prompts_file;     // one prompt per line
  int64_t tokens = 100;         // new tokens per prompt, at least 1
  bool kv_cache = true;         // SamplingOptions::kv_cache
  bool in_flight = true;        // the prompts through the pipe together (sample_in_flight)
  int64_t max_in_flight = 16;   // SamplingOptions::max_in_flight
  std::string format = "text";  // or "jsonl": one JSON object per prompt
  double temperature = 0.8;
  int64_t top_k = 20;
  double top_p = 1.0;         // SamplingOptions::top_p, in (0, 1]
  std::vector<int64_t> stop;  // token ids that end a prompt's generation
  // The model's end-of-sequence ids end it too (generation_config.json's eos_token_id, an id
  // or a list, else model.eos_token_id).
  bool stop_at_end = true;
  uint64_t seed = 1;
  int tensor_parallel = 1;  // the rest of the ranks are pipeline stages
  std::string tokenizer;    // empty: the checkpoint's sample.tokenizer, else bytes
};
int generate_from_checkpoint(const GenerateOptions& options);

}  // namespace pipetrain::trainer
