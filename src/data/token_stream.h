#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"

namespace pipetrain::data {

// A corpus as one sequence of token ids, read a window at a time (text bytes, token files
// and Megatron's indexed datasets are all mapped from disk), so a source draws windows
// without knowing which.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual int64_t size() const = 0;
  // Tokens [start, start + count) as int64 (the caller checks the bounds). InputError when
  // the file holds an id at or above `vocab_size` there (mapped data is checked as read).
  virtual void read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const = 0;
  // Where each document after the first starts, in increasing stream positions, for a
  // stream that records its documents (an indexed dataset's document index); else none.
  virtual const std::vector<int64_t>* document_starts() const { return nullptr; }
};

// Files of unsigned or signed integer ids, mapped read-only and read a window at a time:
// what a rank holds of them is the pages the kernel caches, shared by every rank of the
// machine, not a copy. The files are one stream, in the order added. Ids are checked
// against the vocabulary as they are read.
class MappedTokens : public TokenStream {
 public:
  // Appends `file`'s ids after its first `skip` bytes (a header): `item_size` bytes each (1,
  // 2, 4 or 8), little-endian. The rest's size must be a whole number of them (the caller
  // checks and names the problem).
  void add(std::unique_ptr<io::MappedFile> file, int item_size, bool is_signed,
           std::size_t skip = 0);

  int64_t size() const override { return total_; }
  void read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const override;
  // Reads every id once (in slices), so that one outside [0, vocab_size) is named now, not
  // when a window first reaches it.
  void check_vocabulary(int64_t vocab_size) const;

 private:
  struct Mapped {
    std::unique_ptr<io::MappedFile> file;
    const unsigned char* data = nullptr;  // the file's bytes
    int item_size = 0;
    bool is_signed = false;
    int64_t first = 0;  // its first id's position in the stream
    int64_t tokens = 0;
  };
  static int64_t token_at(const Mapped& file, int64_t index);

  std::vector<Mapped> files_;
  int64_t total_ = 0;
};

// Part [begin, begin + length) of a stream (the training or the validation tokens).
struct TokenSpan {
  std::shared_ptr<const TokenStream> stream;
  int64_t begin = 0;
  int64_t length = 0;
};

}  // namespace pipetrain::data
