#include "unicode_regex.h"

// Oniguruma otherwise defines UChar and regex_t for every file after it (unity builds).
#define ONIG_ESCAPE_UCHAR_COLLISION
#define ONIG_ESCAPE_REGEX_T_COLLISION
#include <oniguruma.h>

#include <memory>

#include "data/utf8.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::data {
namespace {

const auto* bytes_of(const std::string& text) {
  return reinterpret_cast<const OnigUChar*>(text.data());
}

}  // namespace

UnicodeRegex::UnicodeRegex(const std::string& pattern, const std::string& source)
    : source_(source) {
  static const bool initialised = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    return onig_initialize(encodings, 1) == ONIG_NORMAL;
  }();
  OnigErrorInfo info;
  const int status =
      initialised ? onig_new(&regex_, bytes_of(pattern), bytes_of(pattern) + pattern.size(),
                             ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info)
                  : ONIGERR_MEMORY;
  if (status != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, status, &info);
    throw io::InputError(source + ": " + reinterpret_cast<const char*>(message));
  }
}

UnicodeRegex::~UnicodeRegex() {
  onig_free(regex_);
}

std::vector<std::pair<size_t, size_t>> UnicodeRegex::matches(const std::string& text) const {
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(
      onig_region_new(), [](OnigRegion* r) { onig_region_free(r, 1); });
  std::vector<std::pair<size_t, size_t>> found;
  const OnigUChar* begin = bytes_of(text);
  const OnigUChar* end = begin + text.size();
  for (size_t at = 0; at < text.size();) {
    const int where =
        onig_search(regex_, begin, end, begin + at, end, region.get(), ONIG_OPTION_NONE);
    if (where == ONIG_MISMATCH) break;
    if (where < 0) throw io::InputError(source_ + ": the pattern failed on the text");
    const auto match_end = static_cast<size_t>(region->end[0]);
    found.emplace_back(where, match_end);  // an empty one still cuts the text there
    at = match_end > static_cast<size_t>(where) ? match_end
                                                : next_character(text, static_cast<size_t>(where));
  }
  return found;
}

}  // namespace pipetrain::data
