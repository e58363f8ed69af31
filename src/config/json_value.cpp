#include "pipetrain/config/json_value.h"

#include <limits>

#include <sstream>

#include "pipetrain/io/errors.h"

namespace pipetrain::config {
namespace {

std::string format(double x) {
  std::ostringstream text;
  text << x;
  return text.str();
}

[[noreturn]] void wrong_type(const std::string& key, const char* expected,
                             const nlohmann::json& value) {
  throw io::InputError(key + " must be " + expected + ", got " + value.dump());
}

// "at least 1", ">= 0", "> 0", "in 0..60", "in [0, 1)".
std::string describe(const Range& range, bool integer) {
  if (range.min && range.max) {
    if (integer) return "in " + format(*range.min) + ".." + format(*range.max);
    return std::string("in ") + (range.exclusive_min ? "(" : "[") + format(*range.min) + ", " +
           format(*range.max) + (range.exclusive_max ? ")" : "]");
  }
  if (range.min) {
    if (integer) return "at least " + format(*range.min);
    return (range.exclusive_min ? "> " : ">= ") + format(*range.min);
  }
  return (range.exclusive_max ? "< " : "<= ") + format(range.max.value_or(0));
}

void check(const std::string& key, double x, const nlohmann::json& value, const Range& range,
           bool integer) {
  const bool low = range.min && (range.exclusive_min ? x <= *range.min : x < *range.min);
  const bool high = range.max && (range.exclusive_max ? x >= *range.max : x > *range.max);
  if (low || high) {
    throw io::InputError(key + " must be " + describe(range, integer) + ", got " + value.dump());
  }
}

}  // namespace

void throw_input_error(const std::string& message) {
  throw io::InputError(message);
}

nlohmann::json parse_json(const std::string& text, const std::string& source, bool comments) {
  // Nesting is bounded before parsing: the library's values nest (and are freed) recursively.
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        throw io::InputError(source + ": nested deeper than " + std::to_string(kMaxJsonDepth) +
                             " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false, comments);
}

int64_t read_integer(const std::string& key, const nlohmann::json& value, const Range& range) {
  if (!value.is_number_integer()) wrong_type(key, "an integer", value);
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw io::InputError(key + " is too large, got " + value.dump());
  }
  const int64_t x = value.get<int64_t>();
  check(key, static_cast<double>(x), value, range, true);
  return x;
}

double read_number(const std::string& key, const nlohmann::json& value, const Range& range) {
  if (!value.is_number()) wrong_type(key, "a number", value);
  const double x = value.get<double>();
  check(key, x, value, range, false);
  return x;
}

bool read_bool(const std::string& key, const nlohmann::json& value) {
  if (!value.is_boolean()) wrong_type(key, "true or false", value);
  return value.get<bool>();
}

std::string read_string(const std::string& key, const nlohmann::json& value) {
  if (!value.is_string()) wrong_type(key, "a string", value);
  return value.get<std::string>();
}

std::vector<std::string> read_strings(const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) return {value.get<std::string>()};
  std::vector<std::string> strings;
  if (value.is_array()) {
    for (const auto& item : value) {
      if (!item.is_string()) break;
      strings.push_back(item.get<std::string>());
    }
  }
  if (!value.is_array() || strings.size() != value.size())
    throw io::InputError(key + " must be a string or a list of strings");
  return strings;
}

namespace {

// The length of the UTF-8 sequence that starts with `lead`, or 0 when no sequence does.
int utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool valid_utf8(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const int n = utf8_length(static_cast<unsigned char>(text[i]));
    if (n == 0 || i + n > text.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

nlohmann::json utf8_string(const std::string& what, const std::string& text) {
  if (!valid_utf8(text)) {
    throw io::InputError(what +
                         ": not valid UTF-8 (pipetrain keeps it in its JSON config); use a "
                         "UTF-8 name");
  }
  return text;
}

nlohmann::json read_object(const std::string& key, const nlohmann::json& value) {
  if (!value.is_object()) wrong_type(key, "an object", value);
  return value;
}

std::string spell_choices(const std::vector<std::string>& names, Quoting quoting) {
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += quoting == Quoting::kQuoted ? "\"" + names[i] + "\"" : names[i];
  }
  return text;
}

const nlohmann::json* find(const nlohmann::json& root, const std::string& key) {
  const nlohmann::json* here = &root;
  std::string path;
  for (std::size_t start = 0;;) {
    const std::size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot - start);
    if (!here->contains(part)) return nullptr;
    here = &here->at(part);
    path += (path.empty() ? "" : ".") + part;
    if (dot == std::string::npos) return here;
    if (!here->is_object()) wrong_type(path, "an object", *here);
    start = dot + 1;
  }
}

std::string pointer_of(std::string_view key) {
  std::string pointer = "/";
  for (char c : key) pointer += c == '.' ? '/' : c;
  return pointer;
}

}  // namespace pipetrain::config
