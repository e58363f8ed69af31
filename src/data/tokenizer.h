#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/post_processor.h"

namespace pipetrain::data {

// Text to token ids and back, for prompts and generated text.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // The ids of `text` as transformers' encode(text, add_special_tokens) gives them: with
  // the special tokens the tokenizer's post-processor adds (LLaMA 3's and Gemma's BOS)
  // unless `special` omits them.
  std::vector<int64_t> encode(const std::string& text,
                              SpecialTokens special = SpecialTokens::kAdd) const {
    return with_special_tokens(encode_text(text), nullptr, special);
  }
  // A pair of texts, as encode(a, b) lays them out (BERT's [CLS] A [SEP] B [SEP]).
  std::vector<int64_t> encode_pair(const std::string& a, const std::string& b,
                                   SpecialTokens special = SpecialTokens::kAdd) const {
    const std::vector<int64_t> second = encode_text(b);
    return with_special_tokens(encode_text(a), &second, special);
  }
  // Ids the tokenizer does not know are shown as '?'.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // Ids run from 0 to vocab_size() - 1.
  virtual int64_t vocab_size() const = 0;

 protected:
  // The text's ids alone.
  virtual std::vector<int64_t> encode_text(const std::string& text) const = 0;
  // The post-processor: by default the sequences one after the other, nothing added.
  virtual std::vector<int64_t> with_special_tokens(std::vector<int64_t> a,
                                                   const std::vector<int64_t>* b,
                                                   SpecialTokens /*special*/) const {
    if (b) a.insert(a.end(), b->begin(), b->end());
    return a;
  }
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
