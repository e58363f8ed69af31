#include "data/tokenizer.h"

#include <filesystem>

#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> encode_text(const std::string& text) const override {
    std::vector<int64_t> bytes;
    for (const unsigned char c : text) bytes.push_back(c);
    return bytes;
  }
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string text;
    for (const int64_t t : ids) {
      const bool shown = t == '\n' || t == '\t' || (t >= 32 && t < 127);
      text += shown ? static_cast<char>(t) : '?';
    }
    return text;
  }
  int64_t vocab_size() const override { return 256; }
};

}  // namespace

// Defined in sentencepiece_tokenizer.cpp, or in sentencepiece_unavailable.cpp.
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path);
// Defined in hf_tokenizer.cpp.
std::unique_ptr<Tokenizer> load_hugging_face_tokenizer(const std::string& path);

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& path, int64_t model_vocab_size) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (path.empty()) {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else {
    const auto extension = std::filesystem::path(path).extension();
    if (extension != ".model" && extension != ".json") {
      throw io::InputError(path +
                           ": not a tokenizer pipetrain reads (a Hugging Face tokenizer.json or "
                           "a SentencePiece .model)");
    }
    if (!std::filesystem::is_regular_file(path))
      throw io::InputError(path + ": no such tokenizer file");
    tokenizer = extension == ".json" ? load_hugging_face_tokenizer(path) : load_sentencepiece(path);
  }
  if (tokenizer->vocab_size() > model_vocab_size) {
    throw io::InputError((path.empty() ? std::string("byte-level text") : path) + ": " +
                         std::to_string(tokenizer->vocab_size()) +
                         " tokens, more than the model's vocab_size " +
                         std::to_string(model_vocab_size));
  }
  return tokenizer;
}

}  // namespace pipetrain::data
