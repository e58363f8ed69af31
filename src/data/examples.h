#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_position.h"
#include "data/shuffled_epochs.h"
#include "data/token_data.h"
#include "data/token_stream.h"

namespace pipetrain::data {

// Supervised fine-tuning data: examples (one conversation or prompt/completion each) as the
// documents of Megatron indexed datasets, with a loss mask per token beside each prefix:
// PREFIX.mask holds one byte per token of PREFIX.bin, 1 where the token is trained on (an
// answer's), 0 where not (a prompt's), as scripts/prepare-data --chat writes them.

// Whether the prefixes come with loss masks: true when every one has its PREFIX.mask,
// false when none has; InputError naming the first without one when only some have.
bool has_loss_masks(const std::vector<std::string>& prefixes);

// A sample: whole examples (stream positions [begin, end)), at most context + 1 tokens in
// all, trained side by side in one row of the batch.
struct ExampleSpan {
  int64_t begin = 0;
  int64_t end = 0;
};
using Row = std::vector<ExampleSpan>;

struct ExampleCorpus {
  std::shared_ptr<const TokenStream> tokens;
  std::shared_ptr<const TokenStream> masks;  // 0 or 1 per token
  std::vector<Row> train;
  std::vector<Row> validation;
  int64_t examples = 0;       // all of them, training and validation
  int64_t truncated = 0;      // examples longer than context + 1 tokens, cut to that
  int64_t token_count = 0;    // after truncation
  int64_t trained_count = 0;  // of those, the tokens the loss counts (mask 1)
};

// Every example of `prefixes`, in order, whole (none held out, none cut): to score them. The
// masks and sizes are checked as example_corpus checks them.
struct ExampleList {
  std::shared_ptr<const TokenStream> tokens;
  std::shared_ptr<const TokenStream> masks;  // 0 or 1 per token
  std::vector<ExampleSpan> spans;
};
ExampleList read_examples(const std::vector<std::string>& prefixes, int64_t vocab_size);

// The examples of `prefixes` (each with its mask, sizes checked: InputError naming the
// file), the last `validation_fraction` of them (at least one) held out. Each row holds one
// example, or with `pack` as many consecutive examples as fit in context + 1 tokens.
ExampleCorpus example_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                             int64_t context, bool pack, double validation_fraction);

// Fills one row of a micro-batch from `row`'s examples: ids[context] the first `context`
// tokens (padded with 0), labels[context] the next ones where the mask is 1 within the same
// example (else tensor_parallel::kIgnoreIndex), documents[context] each token's example
// within the row (the padding one of its own).
void fill_row(const TokenStream& tokens, const TokenStream& masks, const Row& row,
              int64_t vocab_size, int64_t context, int64_t* ids, int64_t* labels,
              int64_t* documents);

// Micro-batches of `batch` rows: inputs the first `context` tokens of each row (padded with
// 0), labels the next ones, tensor_parallel::kIgnoreIndex where the mask is 0, past an
// example's last token and in the padding. With `pack`, inputs are {ids, documents}, each
// example (and the padding) a document of its own. Rows are read in an order shuffled per
// epoch from (seed, stream, epoch); replicas read that order as SamplePosition says, so every
// layout reads the same global batches.
class ExampleSource : public engine::MicroBatchSource {
 public:
  ExampleSource(std::shared_ptr<const ExampleCorpus> corpus, bool validation, int64_t vocab_size,
                int64_t context, int64_t batch, uint64_t seed, uint64_t stream, SampleShare share,
                bool pack);
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return position_.state(); }
  void restore(const nlohmann::json& state) override { position_.restore(state); }

 private:
  const Row& row_of_sample(int64_t sample);

  std::shared_ptr<const ExampleCorpus> corpus_;
  const std::vector<Row>& rows_;
  int64_t vocab_size_;
  int64_t context_;
  int64_t batch_;
  bool pack_;
  SamplePosition position_;
  ShuffledEpochs order_;
};

}  // namespace pipetrain::data
