#pragma once

#include <string>

// GPT-2's byte-level alphabet: every byte shown as a printable character, so a byte-pair
// vocabulary covers any input without an unknown token.
namespace pipetrain::data {

// GPT-2's pre-tokenizer pattern (contractions, letters, digits, other runs, whitespace).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Each byte of `bytes` as its character of the alphabet (UTF-8).
std::string bytes_to_unicode(const std::string& bytes);

// Back again; a token holding a character outside the alphabet is kept as its own bytes,
// as the tokenizers library's decoder does.
std::string unicode_to_bytes(const std::string& token);

}  // namespace pipetrain::data
