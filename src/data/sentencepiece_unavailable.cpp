// A build without libsentencepiece (e.g. a machine without Debian's libsentencepiece-dev).
#include "data/tokenizer.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path) {
  throw io::InputError(path +
                       ": this build has no SentencePiece (install libsentencepiece-dev "
                       "and rebuild)");
}

bool sentencepiece_available() {
  return false;
}

}  // namespace pipetrain::data
