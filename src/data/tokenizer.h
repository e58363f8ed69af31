#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pipetrain::data {

// Text to token ids and back, for prompts and generated text.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // Ids the tokenizer does not know are shown as '?'.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // Ids run from 0 to vocab_size() - 1.
  virtual int64_t vocab_size() const = 0;
};

// `path` empty: bytes (every byte one token; decoded bytes that are not printable ASCII,
// newline or tab show as '?'); a Hugging Face `.json` file: its BPE tokenizer (the kinds of
// GPT-2, LLaMA-2 and LLaMA-3; see hf_tokenizer.cpp); a SentencePiece `.model` file: that
// model (when the build has SentencePiece). InputError naming the file when it cannot be read, is
// of another kind, or its vocabulary does not fit in `model_vocab_size` ids.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path, int64_t model_vocab_size);

// Whether this build reads SentencePiece models.
bool sentencepiece_available();

}  // namespace pipetrain::data
