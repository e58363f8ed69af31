#include "launch/signal_filter.h"

#include <filesystem>
#include <system_error>

namespace pipetrain::launch {
namespace fs = std::filesystem;

std::string signal_filter_library() {
  std::error_code error;
  const fs::path command = fs::read_symlink("/proc/self/exe", error);
  if (error) return {};
  const fs::path bin = command.parent_path();
  for (const fs::path& candidate :
       {bin / PIPETRAIN_SIGNAL_FILTER,
        bin.parent_path() / PIPETRAIN_INSTALL_LIBDIR / PIPETRAIN_SIGNAL_FILTER}) {
    if (fs::is_regular_file(candidate, error)) return candidate.string();
  }
  return {};
}

std::vector<std::string> with_preload(std::vector<std::string> environment,
                                      const std::string& library) {
  if (library.empty()) return environment;
  const std::string key = "LD_PRELOAD=";
  for (std::string& entry : environment) {
    if (entry.starts_with(key)) {
      const std::string before = entry.substr(key.size());
      entry = key + library + (before.empty() ? "" : ":" + before);
      return environment;
    }
  }
  environment.push_back(key + library);
  return environment;
}

}  // namespace pipetrain::launch
