#include "trainer/model_files.h"

#include <algorithm>

#include "io/atomic_file.h"
#include "io/read_file.h"
#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace fs = std::filesystem;
namespace {

constexpr const char* kModelFiles[] = {
    "tokenizer.json",      "tokenizer.model",    "tokenizer_config.json", "special_tokens_map.json",
    "chat_template.jinja", "chat_template.json", "generation_config.json"};

}  // namespace

std::vector<std::string> model_files_in(const fs::path& folder) {
  std::vector<std::string> found;
  for (const char* name : kModelFiles) {
    std::error_code error;
    if (fs::is_regular_file(folder / name, error)) found.emplace_back(name);
  }
  return found;
}

void copy_model_files(const fs::path& from, const fs::path& to) {
  std::error_code error;
  if (fs::equivalent(from, to, error)) return;
  for (const auto& name : model_files_in(from))
    io::write_file_atomically(to / name, io::read_file(from / name));
}

fs::path model_files_folder(const nlohmann::json& config, const fs::path& checkpoint) {
  if (!model_files_in(checkpoint).empty()) return checkpoint;
  const nlohmann::json::json_pointer named("/sample/tokenizer");
  if (config.contains(named) && config[named].is_string()) {
    const fs::path file = config[named].get<std::string>();
    std::error_code error;
    if (!file.empty() && fs::is_regular_file(file, error)) return file.parent_path();
  }
  return checkpoint;
}

std::vector<int64_t> end_of_sequence_ids(const fs::path& folder, std::vector<int64_t> fallback) {
  const fs::path file = folder / "generation_config.json";
  std::error_code error;
  if (fs::is_regular_file(file, error)) {
    nlohmann::json generation;
    try {
      generation = nlohmann::json::parse(io::read_file(file));
    } catch (const nlohmann::json::exception& e) {
      throw io::InputError(file.string() + ": not JSON (" + e.what() + ")");
    }
    const nlohmann::json eos =
        generation.is_object() ? generation.value("eos_token_id", nlohmann::json()) : nullptr;
    const auto is_id = [](const nlohmann::json& v) {
      return v.is_number_integer() && v.get<int64_t>() >= 0;
    };
    if (is_id(eos)) return {eos.get<int64_t>()};
    if (eos.is_array() && std::all_of(eos.begin(), eos.end(), is_id))
      return eos.get<std::vector<int64_t>>();
    if (!eos.is_null())
      throw io::InputError(file.string() + ": eos_token_id must be a token id or a list of them");
  }
  return fallback;
}

}  // namespace pipetrain::trainer
