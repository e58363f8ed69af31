#pragma once

#include <cstddef>
#include <string>

// UTF-8 as the tokenizers read and write it.
namespace pipetrain::data {

// The index of the character after the one starting at `text[at]`; a byte that starts no
// valid character is a character of its own.
size_t next_character(const std::string& text, size_t at);

bool is_utf8(const std::string& text);

// `bytes` with every invalid sequence replaced by U+FFFD, as Rust's from_utf8_lossy does.
std::string lossy_utf8(const std::string& bytes);

}  // namespace pipetrain::data
