#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace pipetrain::config {

// Typed, path-aware access to one object of a JSON config: errors name the full key
// ("model.d_model must be an integer, got \"wide\"") and are InputErrors.
class ConfigSection {
 public:
  ConfigSection(const nlohmann::json& object, std::string path);

  bool has(const std::string& key) const { return object_.contains(key); }
  std::vector<std::string> keys() const;
  // A list of numbers (e.g. Adam's betas); `fallback` if absent.
  std::vector<double> get_numbers(const std::string& key,
                                  const std::vector<double>& fallback) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // A nested object (empty if absent).
  ConfigSection section(const std::string& key) const;

  // Keys present but not in `known`, as full paths, for a warning.
  std::vector<std::string> unknown_keys(const std::vector<std::string>& known) const;
  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return object_; }

 private:
  std::string key_path(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const;

  nlohmann::json object_;
  std::string path_;
};

// What kind of JSON file read_json_file reads: named so in its errors, read whole up to a
// bound (parsed whole: a bound, not a limit), comments allowed or not.
struct JsonFile {
  std::string what = "config file";
  std::uintmax_t max_bytes = std::uintmax_t{16} << 20;
  bool comments = true;
};

// Parses a JSON file holding an object; InputError naming the file if it is missing, too
// large, or not a JSON object.
nlohmann::json read_json_file(const std::string& path, const JsonFile& kind = {});

}  // namespace pipetrain::config
