#include "data/utf8.h"

namespace pipetrain::data {
namespace {

// Well-formed UTF-8 (Unicode's table 3-7): the length a lead byte starts and the range its
// second byte must fall in (no overlong forms, no surrogates, nothing above U+10FFFF).
struct Lead {
  size_t length;  // 0: not a lead byte
  unsigned char second_min, second_max;
};

Lead lead_of(unsigned char byte) {
  if (byte < 0x80) return {1, 0, 0};
  if (byte >= 0xC2 && byte <= 0xDF) return {2, 0x80, 0xBF};
  if (byte == 0xE0) return {3, 0xA0, 0xBF};
  if (byte == 0xED) return {3, 0x80, 0x9F};
  if (byte >= 0xE1 && byte <= 0xEF) return {3, 0x80, 0xBF};
  if (byte == 0xF0) return {4, 0x90, 0xBF};
  if (byte >= 0xF1 && byte <= 0xF3) return {4, 0x80, 0xBF};
  if (byte == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// How many bytes from `at` belong to a well-formed prefix of the character starting there
// (its whole length when it is complete).
size_t valid_prefix(const std::string& text, size_t at) {
  const Lead lead = lead_of(static_cast<unsigned char>(text[at]));
  if (lead.length <= 1) return lead.length;
  size_t taken = 1;
  for (; taken < lead.length && at + taken < text.size(); ++taken) {
    const auto byte = static_cast<unsigned char>(text[at + taken]);
    const bool fits =
        taken == 1 ? byte >= lead.second_min && byte <= lead.second_max : (byte & 0xC0) == 0x80;
    if (!fits) break;
  }
  return taken;
}

bool complete(const std::string& text, size_t at, size_t prefix) {
  return prefix > 0 && prefix == lead_of(static_cast<unsigned char>(text[at])).length;
}

}  // namespace

size_t next_character(const std::string& text, size_t at) {
  const size_t prefix = valid_prefix(text, at);
  return complete(text, at, prefix) ? at + prefix : at + 1;
}

bool is_utf8(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const size_t prefix = valid_prefix(text, at);
    if (!complete(text, at, prefix)) return false;
    at += prefix;
  }
  return true;
}

std::string lossy_utf8(const std::string& bytes) {
  std::string text;
  for (size_t at = 0; at < bytes.size();) {
    const size_t prefix = valid_prefix(bytes, at);
    if (complete(bytes, at, prefix)) {
      text.append(bytes, at, prefix);
    } else {  // one U+FFFD for the longest well-formed start of a character, or one byte
      text += "\xEF\xBF\xBD";
    }
    at += prefix > 0 ? prefix : 1;
  }
  return text;
}

}  // namespace pipetrain::data
