#include "pipetrain/config/config_section.h"

#include <filesystem>

#include "io/read_file.h"
#include "pipetrain/config/json_value.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::config {

ConfigSection::ConfigSection(const nlohmann::json& object, std::string path)
    : object_(object.is_null() ? nlohmann::json::object() : object), path_(std::move(path)) {
  if (!object_.is_object())
    throw io::InputError(path_ + " must be an object, got " + object_.dump());
}

std::string ConfigSection::key_path(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void ConfigSection::wrong_type(const std::string& key, const char* expected) const {
  throw io::InputError(key_path(key) + " must be " + expected + ", got " + object_.at(key).dump());
}

int64_t ConfigSection::get_int(const std::string& key, int64_t fallback) const {
  return has(key) ? read_integer(key_path(key), object_.at(key), {}) : fallback;
}

double ConfigSection::get_double(const std::string& key, double fallback) const {
  return has(key) ? read_number(key_path(key), object_.at(key), {}) : fallback;
}

bool ConfigSection::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? read_bool(key_path(key), object_.at(key)) : fallback;
}

std::string ConfigSection::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? read_string(key_path(key), object_.at(key)) : fallback;
}

std::vector<std::string> ConfigSection::keys() const {
  std::vector<std::string> keys;
  for (const auto& item : object_.items()) keys.push_back(item.key());
  return keys;
}

std::vector<double> ConfigSection::get_numbers(const std::string& key,
                                               const std::vector<double>& fallback) const {
  if (!has(key)) return fallback;
  const auto& value = object_.at(key);
  if (!value.is_array()) wrong_type(key, "a list of numbers");
  std::vector<double> numbers;
  for (const auto& item : value) {
    if (!item.is_number()) wrong_type(key, "a list of numbers");
    numbers.push_back(item.get<double>());
  }
  return numbers;
}

ConfigSection ConfigSection::section(const std::string& key) const {
  if (!has(key)) return ConfigSection(nlohmann::json::object(), key_path(key));
  if (!object_.at(key).is_object()) wrong_type(key, "an object");
  return ConfigSection(object_.at(key), key_path(key));
}

std::vector<std::string> ConfigSection::unknown_keys(const std::vector<std::string>& known) const {
  std::vector<std::string> unknown;
  for (const auto& item : object_.items()) {
    if (std::find(known.begin(), known.end(), item.key()) == known.end()) {
      unknown.push_back(key_path(item.key()));
    }
  }
  return unknown;
}

nlohmann::json read_json_file(const std::string& path, const JsonFile& kind) {
  const std::string named = kind.what + " " + path;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) throw io::InputError(named + " cannot be read");
  const std::string text = io::read_file(path, kind.max_bytes);  // refuses FIFOs, devices, folders
  nlohmann::json json = parse_json(text, named, kind.comments);
  if (json.is_discarded()) throw io::InputError(named + " is not valid JSON");
  if (!json.is_object()) throw io::InputError(named + " must hold a JSON object");
  return json;
}

}  // namespace pipetrain::config
