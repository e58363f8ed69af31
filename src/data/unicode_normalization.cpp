#include "unicode_normalization.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <stdexcept>
#include <vector>

namespace pipetrain::data {
namespace {

const UNormalizer2* normalizer(NormalForm form) {
  UErrorCode error = U_ZERO_ERROR;
  const UNormalizer2* made = nullptr;
  switch (form) {
    case NormalForm::kNfc:
      made = unorm2_getNFCInstance(&error);
      break;
    case NormalForm::kNfd:
      made = unorm2_getNFDInstance(&error);
      break;
    case NormalForm::kNfkc:
      made = unorm2_getNFKCInstance(&error);
      break;
    case NormalForm::kNfkd:
      made = unorm2_getNFKDInstance(&error);
      break;
  }
  if (U_FAILURE(error) || !made)
    throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(error));
  return made;
}

void check(UErrorCode error, const char* step) {
  if (U_FAILURE(error))
    throw std::runtime_error(std::string("Unicode normalization: ") + step + ": " +
                             u_errorName(error));
}

}  // namespace

std::string normalize_unicode(const std::string& text, NormalForm form) {
  if (text.empty()) return text;
  const auto length = static_cast<int32_t>(text.size());
  // UTF-8 to UTF-16 (ill-formed bytes as U+FFFD), normalized, and back.
  std::vector<UChar> wide(text.size() + 1);
  int32_t wide_length = 0;
  UErrorCode error = U_ZERO_ERROR;
  u_strFromUTF8WithSub(wide.data(), static_cast<int32_t>(wide.size()), &wide_length, text.data(),
                       length, 0xFFFD, nullptr, &error);
  check(error, "decoding");
  const UNormalizer2* n = normalizer(form);
  std::vector<UChar> normal(static_cast<size_t>(wide_length) * 4 + 16);
  error = U_ZERO_ERROR;
  int32_t normal_length = unorm2_normalize(n, wide.data(), wide_length, normal.data(),
                                           static_cast<int32_t>(normal.size()), &error);
  if (error == U_BUFFER_OVERFLOW_ERROR) {
    normal.resize(static_cast<size_t>(normal_length) + 1);
    error = U_ZERO_ERROR;
    normal_length = unorm2_normalize(n, wide.data(), wide_length, normal.data(),
                                     static_cast<int32_t>(normal.size()), &error);
  }
  check(error, "normalizing");
  std::string out(static_cast<size_t>(normal_length) * 3 + 1, '\0');
  int32_t out_length = 0;
  error = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_length, normal.data(),
              normal_length, &error);
  check(error, "encoding");
  out.resize(static_cast<size_t>(out_length));
  return out;
}

}  // namespace pipetrain::data
