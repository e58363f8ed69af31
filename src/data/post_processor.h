#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace pipetrain::data {

// Whether an encoding gets the special tokens its tokenizer adds around text (BOS, CLS,
// SEP), as transformers' add_special_tokens (on by default there, and here).
enum class SpecialTokens { kAdd, kOmit };

// tokenizer.json's post_processor, applied to ids as the `tokenizers` library applies it:
// TemplateProcessing (single and pair templates, their special tokens' ids), BertProcessing
// ([CLS] A [SEP], [CLS] A [SEP] B [SEP]), RobertaProcessing (<s> A </s>, <s> A </s></s> B
// </s>), ByteLevel (ids unchanged) and a Sequence of them with at most one that adds
// tokens. Any other kind or field is refused (InputError naming it).
class PostProcessor {
 public:
  // `stage`: the post_processor field (null: none); `source` names the file in errors.
  PostProcessor(const nlohmann::json& stage, const std::string& source);

  // The ids of sequence `a` (and `b` for a pair) as the template lays them out, with its
  // special tokens where `special` adds them.
  std::vector<int64_t> apply(const std::vector<int64_t>& a, const std::vector<int64_t>* b,
                             SpecialTokens special) const;
  // One more than the largest id the templates add (0 when none).
  int64_t ids_end() const;

 private:
  // A template piece: sequence A (0) or B (1), or a special token's ids.
  struct Piece {
    int sequence = -1;
    std::vector<int64_t> ids;
  };
  using Template = std::vector<Piece>;

  void read(const nlohmann::json& stage, const std::string& field, const std::string& source);

  bool templated_ = false;  // else the ids pass through
  Template single_;
  Template pair_;
};

}  // namespace pipetrain::data
