#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_stream.h"
#include "io/mapped_file.h"

namespace pipetrain::data {

// Megatron-LM's indexed datasets (the MMIDIDX format its preprocess_data.py writes):
// PREFIX.idx holds a header (magic, version 1, dtype code, sequence and document counts),
// then each sequence's length in tokens (int32), its byte offset in PREFIX.bin (int64) and
// the document index (int64 sequence boundaries); PREFIX.bin holds the tokens. Each .bin is
// mapped read-only; the prefixes' sequences are one stream, in order. Windows cross
// sequence and document boundaries as in Megatron's GPT dataset (which relies on the EOD
// token preprocess_data.py appends to each document).
// The prefix a path names: PREFIX, PREFIX.bin or PREFIX.idx.
std::string indexed_prefix(std::string path);

class IndexedTokens : public MappedTokens {
 public:
  // Opens every prefix (PREFIX, PREFIX.bin or PREFIX.idx), checking the header, the dtype
  // (an integer type), the counts against the .idx size, and every sequence's offset and
  // length against the .bin: sequences must lie end to end from offset 0 and fill the .bin,
  // as Megatron's builder writes them. The .idx is mapped too, its header's counts checked
  // against its size before the rest is read. InputError naming the file otherwise.
  // With `record_documents`, where each document starts is kept (8 bytes per document) for
  // packing by the document index (document_starts); else none.
  explicit IndexedTokens(const std::vector<std::string>& prefixes, bool record_documents = false);

  int64_t documents() const { return documents_; }
  const std::vector<int64_t>* document_starts() const override {
    return record_documents_ ? &document_starts_ : nullptr;
  }

 private:
  int64_t documents_ = 0;
  bool record_documents_ = false;
  std::vector<int64_t> document_starts_;  // every file's documents, the first excepted
};

}  // namespace pipetrain::data
