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

// Preference pairs (prepare-data --preference): examples with loss masks, the chosen answer
// as document 2i and the rejected one as document 2i + 1, both after the same prompt. The
// last `validation_fraction` of the pairs (at least one) are held out.
struct PreferenceCorpus {
  ExampleList examples;
  std::vector<int64_t> train;       // pair indices
  std::vector<int64_t> validation;  // pair indices
  // Each example's reference log-probability (the sum over its completion tokens), in the
  // examples' order; set before the first micro-batch is drawn.
  std::vector<double> reference;

  int64_t pairs() const { return static_cast<int64_t>(examples.spans.size()) / 2; }
};

// Reads and checks the pairs: an even number of examples, each at most context + 1 tokens,
// each answer with a token the loss counts, and the two of a pair after the same prompt
// (the same tokens up to the first counted one). InputError naming the pair otherwise.
PreferenceCorpus preference_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                                   int64_t context, double validation_fraction);

// Micro-batches of `batch` rows (even): batch / 2 pairs, each as its chosen row then its
// rejected one (ids and labels as ExampleSource's, one example per row), labels {next
// tokens, reference [batch] float64}. Pairs are read in an order shuffled per epoch from
// (seed, stream, epoch), shared out over replicas as SamplePosition says (a sample is a
// pair), so every layout reads the same global batches.
class PairSource : public engine::MicroBatchSource {
 public:
  PairSource(std::shared_ptr<const PreferenceCorpus> corpus, bool validation, int64_t vocab_size,
             int64_t context, int64_t batch, uint64_t seed, uint64_t stream, SampleShare share);
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return position_.state(); }
  void restore(const nlohmann::json& state) override { position_.restore(state); }

 private:
  int64_t pair_of_sample(int64_t sample);

  std::shared_ptr<const PreferenceCorpus> corpus_;
  const std::vector<int64_t>& pairs_;
  int64_t vocab_size_;
  int64_t context_;
  int64_t batch_;
  SamplePosition position_;
  ShuffledEpochs order_;
};

}  // namespace pipetrain::data
