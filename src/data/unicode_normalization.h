#pragma once

#include <string>

// Unicode normalization forms of UTF-8 text, as tokenizer.json's NFC, NFD, NFKC and NFKD
// normalizers apply them (through ICU, Debian's libicu).
namespace pipetrain::data {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// `text` (UTF-8; ill-formed bytes become U+FFFD first) in `form`.
std::string normalize_unicode(const std::string& text, NormalForm form);

}  // namespace pipetrain::data
