#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/sample_position.h"
#include "data/token_stream.h"
#include "pipetrain/data/data_source.h"

namespace pipetrain::data {

// A token stream split into training and validation parts.
struct TokenCorpus {
  TokenSpan train;
  TokenSpan validation;
  int64_t vocab_size = 256;
};

// Bytes of every regular file under `paths` (files or folders, recursively, in name order;
// symbolic links skipped so the same text is not read twice), vocabulary 256. The last
// `validation_fraction` of the bytes is the validation part. Throws InputError for a
// missing path, no files, or too little text.
TokenCorpus text_corpus(const std::vector<std::string>& paths, double validation_fraction);

// Pre-tokenized files: flat little-endian uint16 or uint32 ids (`bytes_per_token` 2 or 4).
// Throws InputError naming the file for a size that is not a whole number of tokens, an
// empty file, or an id >= vocab_size.
TokenCorpus token_files(const std::vector<std::string>& paths, int bytes_per_token,
                        int64_t vocab_size, double validation_fraction);

// Megatron indexed datasets (see IndexedTokens), mapped rather than read: ids are checked
// against `vocab_size` as windows are drawn (InputError naming the file), not up front.
// `record_documents`: the stream keeps where documents start (DocumentSplit::by_index).
TokenCorpus indexed_corpus(const std::vector<std::string>& prefixes, int64_t vocab_size,
                           double validation_fraction, bool record_documents = false);

// The random streams of a corpus's two parts (SequenceSource's `stream`), as `pipetrain
// train` draws them.
constexpr uint64_t kTrainingStream = 0;
constexpr uint64_t kValidationStream = 1 << 20;

// Language-model micro-batches: `batch` windows of `context` + 1 tokens of `tokens`, sample k
// at a position drawn from (seed, stream, k) alone, read as SamplePosition says: the same
// global batches at every layout, and a stream can resume anywhere. Inputs are the first
// `context` tokens, labels the next ones. With packed documents the inputs are {ids,
// documents}: each input position's document in its window, counting the `end_id` ids
// before it (the id ends its document; the next token starts the next one), or,
// `by_index`, the starts of the stream's documents (TokenStream::document_starts) up to it.
struct DocumentSplit {
  std::optional<int64_t> end_id{};
  bool by_index = false;
};

class SequenceSource : public engine::MicroBatchSource {
 public:
  SequenceSource(TokenSpan tokens, int64_t vocab_size, int64_t context, int64_t batch,
                 uint64_t seed, uint64_t stream, SampleShare share = {},
                 DocumentSplit documents = {});
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return position_.state(); }
  void restore(const nlohmann::json& state) override { position_.restore(state); }

 private:
  TokenSpan tokens_;
  int64_t vocab_size_;
  int64_t context_;
  int64_t batch_;
  uint64_t seed_;
  uint64_t stream_;
  DocumentSplit documents_;
  SamplePosition position_;
};

// The document of each position of `ids` ([batch, seq]): the number of `document_end` ids
// before it in its row.
at::Tensor documents_of(const at::Tensor& ids, int64_t document_end);

// The document of each position of the windows starting at `starts` ([batch]) and holding
// `length` positions each: the number of `document_starts` (increasing stream positions)
// in (start, start + position].
at::Tensor documents_from_starts(const at::Tensor& starts, int64_t length,
                                 const std::vector<int64_t>& document_starts);

// Regression data for the MLP: x uniform in [-1, 1), y a fixed random teacher network's
// output (tanh layer, then linear), sample k drawn from (seed, stream, k) like SequenceSource.
class RegressionSource : public engine::MicroBatchSource {
 public:
  RegressionSource(int64_t inputs, int64_t outputs, int64_t batch, uint64_t seed, uint64_t stream,
                   SampleShare share = {});
  engine::MicroBatch next() override;
  nlohmann::json state() const override { return position_.state(); }
  void restore(const nlohmann::json& state) override { position_.restore(state); }

 private:
  int64_t inputs_;
  int64_t batch_;
  uint64_t seed_;
  uint64_t stream_;
  at::Tensor hidden_weight_;
  at::Tensor output_weight_;
  SamplePosition position_;
};

}  // namespace pipetrain::data
