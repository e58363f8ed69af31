#include "trainer/output_paths.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace {

namespace fs = std::filesystem;

bool writable_folder(const fs::path& folder) {
  std::error_code error;
  return fs::is_directory(folder, error) && ::access(folder.c_str(), W_OK | X_OK) == 0;
}

// A folder that exists, or can be made below its nearest existing ancestor.
void check_folder(const std::string& key, const std::string& path, const std::string& shown) {
  std::error_code error;
  if (fs::exists(path, error) && !fs::is_directory(path, error))
    throw io::InputError(key + " " + shown + " exists and is not a folder");
  fs::path existing = fs::absolute(path, error);
  while (!fs::exists(existing, error) && existing.has_parent_path() &&
         existing.parent_path() != existing) {
    existing = existing.parent_path();
  }
  if (!writable_folder(existing)) {
    throw io::InputError(key + " " + shown + ": cannot be created in " + existing.string() +
                         " (not a writable folder)");
  }
}

void check_folder(const std::string& key, const std::string& path) {
  if (!path.empty()) check_folder(key, path, path);
}

// A file to write whose folder exists or can be made (make_output_folders makes it).
void check_file(const std::string& key, const std::string& path) {
  if (path.empty()) return;
  std::error_code error;
  if (fs::is_directory(path, error))
    throw io::InputError(key + " " + path + " is a folder, not a file to write");
  const fs::path folder = fs::path(path).parent_path();
  check_folder(key, folder.empty() ? std::string(".") : folder.string(), path);
}

}  // namespace

void check_output_folder(const std::string& key, const std::string& path) {
  check_folder(key, path.empty() ? std::string(".") : path, path);
}

void make_folder(const std::string& key, const std::string& path) {
  std::error_code error;
  fs::create_directories(path, error);
  if (error) throw io::InputError(key + " " + path + ": cannot be made (" + error.message() + ")");
}

void make_output_folders(const TrainerConfig& config) {
  const std::pair<const char*, const std::string*> files[] = {
      {"trace", &config.trace}, {"log.metrics", &config.log.metrics}, {"log.csv", &config.log.csv}};
  for (const auto& [key, file] : files) {
    const fs::path folder = fs::path(*file).parent_path();
    if (!file->empty() && !folder.empty()) make_folder(key, folder.string());
  }
}

void check_output_paths(const TrainerConfig& config) {
  check_folder("save", config.save);
  check_file("trace", config.trace);
  check_file("log.metrics", config.log.metrics);
  check_file("log.csv", config.log.csv);
  check_folder("log.tensorboard", config.log.tensorboard);
}

}  // namespace pipetrain::trainer
