#include "data/byte_level.h"

#include <array>
#include <cstdint>
#include <unordered_map>

#include "data/utf8.h"

namespace pipetrain::data {
namespace {

std::string encode_code_point(uint32_t code) {
  std::string text;
  if (code < 0x80) {
    text += static_cast<char>(code);
  } else {  // the alphabet stays below U+0800: two bytes
    text += static_cast<char>(0xC0 | (code >> 6));
    text += static_cast<char>(0x80 | (code & 0x3F));
  }
  return text;
}

// Printable Latin-1 bytes stand for themselves; the others take code points from U+0100 on.
struct Alphabet {
  std::array<std::string, 256> of_byte;
  std::unordered_map<std::string, char> byte_of;

  Alphabet() {
    uint32_t next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                             (byte >= 0xAE && byte <= 0xFF);
      of_byte[byte] = encode_code_point(printable ? byte : next++);
      byte_of[of_byte[byte]] = static_cast<char>(byte);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

std::string bytes_to_unicode(const std::string& bytes) {
  std::string text;
  for (const unsigned char byte : bytes) text += alphabet().of_byte[byte];
  return text;
}

std::string unicode_to_bytes(const std::string& token) {
  std::string bytes;
  for (size_t at = 0; at < token.size();) {
    const size_t next = next_character(token, at);
    const auto found = alphabet().byte_of.find(token.substr(at, next - at));
    if (found == alphabet().byte_of.end()) return token;
    bytes += found->second;
    at = next;
  }
  return bytes;
}

}  // namespace pipetrain::data
