#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

// Oniguruma's regular expressions over UTF-8 (what the tokenizers library splits text
// with, so \p{L}, lookahead and its other syntax mean the same here).
struct re_pattern_buffer;

namespace pipetrain::data {

class UnicodeRegex {
 public:
  // InputError naming `source` when `pattern` does not compile.
  UnicodeRegex(const std::string& pattern, const std::string& source);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Byte ranges [begin, end) of the successive non-overlapping matches (after an empty one
  // the search goes on a character later). InputError when the search itself fails.
  std::vector<std::pair<size_t, size_t>> matches(const std::string& text) const;

 private:
  std::string source_;
  re_pattern_buffer* regex_ = nullptr;
};

}  // namespace pipetrain::data
