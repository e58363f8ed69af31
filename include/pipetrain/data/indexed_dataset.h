#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/data/token_stream.h"
#include "pipetrain/io/mapped_file.h"

namespace pipetrain::data {

// Megatron-LM's indexed datasets (the MMIDIDX format its preprocess_data.py writes):
// PREFIX.idx holds a header (magic, version 1, dtype code, sequence and document counts),
// then each sequence's length in tokens (int32), its byte offset in PREFIX.bin (int64) and
// the document index (int64 sequence boundaries); PREFIX.bin holds the tokens. Each .bin is
// mapped read-only; the prefixes' sequences are one stream, in order. Windows cross
// sequence and document boundaries as in Megatron's GPT dataset (which relies on the EOD
// token preprocess_data.py appends to each document).
class IndexedTokens : public TokenStream {
 public:
  // Opens every prefix (PREFIX, PREFIX.bin or PREFIX.idx), checking the header, the dtype
  // (an integer type), the counts against the .idx size, and every sequence's offset and
  // length against the .bin: sequences must lie end to end from offset 0 and fill the .bin,
  // as Megatron's builder writes them. InputError naming the file otherwise.
  explicit IndexedTokens(const std::vector<std::string>& prefixes);

  int64_t size() const override { return total_; }
  void read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const override;

  int64_t documents() const { return documents_; }

 private:
  struct Mapped {
    std::unique_ptr<io::MappedFile> bin;
    const unsigned char* data = nullptr;  // bin's bytes
    int item_size = 0;
    bool is_signed = false;
    int64_t first = 0;  // its first token's position in the stream
    int64_t tokens = 0;
  };
  int64_t token_at(const Mapped& file, int64_t index) const;

  std::vector<Mapped> files_;
  int64_t total_ = 0;
  int64_t documents_ = 0;
};

}  // namespace pipetrain::data
