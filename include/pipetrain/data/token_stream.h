#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace pipetrain::data {

// A corpus as one sequence of token ids, read a window at a time: held in memory (text
// bytes, token files) or mapped from disk (Megatron's indexed datasets), so a source draws
// windows without knowing which.
class TokenStream {
 public:
  virtual ~TokenStream() = default;
  virtual int64_t size() const = 0;
  // Tokens [start, start + count) as int64 (the caller checks the bounds). InputError when
  // the file holds an id at or above `vocab_size` there (mapped data is checked as read).
  virtual void read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const = 0;
};

// Ids held in memory: a 1-D int64 tensor, checked against the vocabulary when loaded.
class TensorTokens : public TokenStream {
 public:
  explicit TensorTokens(at::Tensor ids);
  int64_t size() const override { return ids_.numel(); }
  void read(int64_t start, int64_t count, int64_t vocab_size, int64_t* out) const override;

 private:
  at::Tensor ids_;
};

// Part [begin, begin + length) of a stream (the training or the validation tokens).
struct TokenSpan {
  std::shared_ptr<const TokenStream> stream;
  int64_t begin = 0;
  int64_t length = 0;
};

}  // namespace pipetrain::data
