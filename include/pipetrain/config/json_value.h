#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// Reading one value of a JSON config: type checks and bounds, with errors (InputError)
// that name the key, e.g. `pipeline.stages must be at least 1, got 0`.
namespace pipetrain::config {

// Bounds of a numeric key; unset ends are open. Integers read "at least MIN"; numbers
// ">= MIN" or "> MIN" (exclusive); both ends "in MIN..MAX" / "in [MIN, MAX)".
struct Range {
  std::optional<double> min{};
  std::optional<double> max{};
  bool exclusive_min{false};
  bool exclusive_max{false};
};
inline Range at_least(double min) {
  return {.min = min};
}
inline Range above(double min) {
  return {.min = min, .exclusive_min = true};
}
inline Range within(double min, double max) {
  return {.min = min, .max = max};
}

// The spellings of a choice's values, in the order the docs and errors list them.
template <typename Value>
using Names = std::vector<std::pair<std::string, Value>>;
// A string key's allowed values, each its own spelling.
inline Names<std::string> spellings(const std::vector<std::string>& values) {
  Names<std::string> names;
  for (const auto& value : values) names.emplace_back(value, value);
  return names;
}
// How an error lists the allowed spellings: "a", "b" or "c" — or bare: A, B or C.
enum class Quoting { kQuoted, kBare };

[[noreturn]] void throw_input_error(const std::string& message);

int64_t read_integer(const std::string& key, const nlohmann::json& value, const Range& range);
double read_number(const std::string& key, const nlohmann::json& value, const Range& range);
bool read_bool(const std::string& key, const nlohmann::json& value);
std::string read_string(const std::string& key, const nlohmann::json& value);
std::vector<std::string> read_strings(const std::string& key, const nlohmann::json& value);
nlohmann::json read_object(const std::string& key, const nlohmann::json& value);
// `text` from outside JSON (e.g. a path on the command line) as a JSON string; InputError
// naming `what` when it is not UTF-8, which JSON (and so the effective config) cannot hold.
nlohmann::json utf8_string(const std::string& what, const std::string& text);

// "a", "b" or "c" (or A, B or C).
std::string spell_choices(const std::vector<std::string>& names, Quoting quoting);

template <typename Value>
Value read_choice(const std::string& key, const nlohmann::json& value, const Names<Value>& names,
                  Quoting quoting) {
  const std::string text = read_string(key, value);
  std::vector<std::string> spellings;
  for (const auto& [name, choice] : names) {
    if (name == text) return choice;
    spellings.push_back(name);
  }
  throw_input_error(key + " must be " + spell_choices(spellings, quoting) + ", got " +
                    value.dump());
}

template <typename Value>
const std::string& name_of(const Names<Value>& names, const Value& value) {
  for (const auto& [name, choice] : names) {
    if (choice == value) return name;
  }
  throw_input_error("a value without a name");
}

// The value at dotted path `key` in `root`, null if absent; InputError if a part of the
// path on the way is not an object ("pipeline must be an object, got []").
const nlohmann::json* find(const nlohmann::json& root, const std::string& key);
// "pipeline.stages" as a JSON pointer: "/pipeline/stages".
std::string pointer_of(std::string_view key);

// Parses untrusted JSON text (a discarded value when it is not JSON); InputError naming
// `source` when it nests deeper than kMaxJsonDepth levels.
inline constexpr int kMaxJsonDepth = 64;
nlohmann::json parse_json(const std::string& text, const std::string& source,
                          bool comments = false);

}  // namespace pipetrain::config
