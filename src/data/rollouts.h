#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/examples.h"
#include "data/sample_position.h"
#include "data/shuffled_epochs.h"
#include "pipetrain/engine/micro_batch_source.h"

namespace pipetrain::data {

// Rollouts for policy-gradient steps: prepared examples (indexed datasets with loss masks,
// the mask marking each completion's tokens) with numbers per token beside them, indexed by
// the token's place in the examples' stream (as `pipetrain logprobs` lays out its file).
struct RolloutCorpus {
  ExampleList examples;
  std::vector<float> advantages;    // per token
  std::vector<float> old_logprobs;  // per token; empty: the policy's own (on-policy)
  std::vector<float> ref_logprobs;  // per token; empty: none (no KL term)
  std::vector<int64_t> train;       // example indices
  std::vector<int64_t> validation;  // example indices
};

// The examples of `prefixes` (masks required; each at most context + 1 tokens, InputError
// naming it otherwise), the last `validation_fraction` of them (at least one) held out. The
// numbers are set by the caller, one per token of examples.tokens.
RolloutCorpus rollout_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                             int64_t context, double validation_fraction);

// Micro-batches of `batch` rows, one example each (ids and labels as ExampleSource's), labels
// {next tokens, advantages, old log-probabilities (NaN where none), reference
// log-probabilities (0 where none)}, each float32 [batch, context] at the position that
// predicts its token. Examples are read in an order shuffled per epoch from (seed, stream,
// epoch), shared out over replicas as SamplePosition says.
class RolloutSource : public engine::MicroBatchSource {
 public:
  RolloutSource(std::shared_ptr<const RolloutCorpus> corpus, bool validation, int64_t vocab_size,
                int64_t context, int64_t batch, uint64_t seed, uint64_t stream, SampleShare share);
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return position_.state(); }
  void restore(const nlohmann::json& state) override { position_.restore(state); }

 private:
  int64_t example_of_sample(int64_t sample);

  std::shared_ptr<const RolloutCorpus> corpus_;
  const std::vector<int64_t>& examples_;
  int64_t vocab_size_;
  int64_t context_;
  int64_t batch_;
  SamplePosition position_;
  ShuffledEpochs order_;
};

}  // namespace pipetrain::data
