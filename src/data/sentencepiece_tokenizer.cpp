// SentencePiece models through Debian's libsentencepiece.
#include <sentencepiece_processor.h>

#include "data/tokenizer.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    const auto status = processor_.Load(path);
    if (!status.ok())
      throw io::InputError(path + ": not a SentencePiece model (" + status.ToString() + ")");
  }
  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::vector<int> ids;
    processor_.Encode(text, &ids).IgnoreError();
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int> known;
    std::string text;
    auto flush = [&] {
      std::string piece;
      processor_.Decode(known, &piece).IgnoreError();
      text += piece;
      known.clear();
    };
    for (const int64_t id : ids) {
      if (id >= 0 && id < processor_.GetPieceSize()) {
        known.push_back(static_cast<int>(id));
      } else {  // the model's vocabulary may be padded beyond the tokenizer's
        flush();
        text += '?';
      }
    }
    flush();
    return text;
  }
  int64_t vocab_size() const override { return processor_.GetPieceSize(); }

 private:
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

bool sentencepiece_available() {
  return true;
}

}  // namespace pipetrain::data
