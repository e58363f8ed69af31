#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "launch/mpirun_command.h"
#include "pipetrain/io/errors.h"

extern char** environ;

namespace pipetrain::launch {
namespace {

constexpr int kSmallHostCores = 16;

// Names of the environment variables every rank must see, also on other hosts.
std::vector<std::string> forwarded_variables() {
  std::vector<std::string> names;
  for (char** entry = environ; *entry; ++entry) {
    const std::string variable(*entry);
    const std::string name = variable.substr(0, variable.find('='));
    if (name.rfind("PIPETRAIN_", 0) == 0 || name.rfind("OMP_", 0) == 0) names.push_back(name);
  }
  return names;
}

// Whether `program` runs: a path to an executable, or a name found on PATH.
bool find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::istringstream folders(path ? path : "");
  for (std::string folder; std::getline(folders, folder, ':');) {
    if (::access((folder + "/" + program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<std::string> mpirun_command(const LaunchOptions& options) {
  if (options.ranks < 1) {
    throw io::InputError("-n must be at least 1, got " + std::to_string(options.ranks));
  }
  if (options.command.empty()) throw io::InputError("launch needs a program to run");
  if (!find_program(options.command.front())) {
    throw io::InputError("launch: program " + options.command.front() +
                         " not found or not executable");
  }
  if (!options.hostfile.empty() && !std::filesystem::is_regular_file(options.hostfile)) {
    throw io::InputError("--hostfile " + options.hostfile + " does not exist");
  }
  // --quiet: Open MPI's help banners (e.g. after MPI_Abort) bury pipetrain's one-line
  // messages; the failures they announce are checked here or reported by the ranks.
  std::vector<std::string> argv = {"mpirun", "--quiet", "-np", std::to_string(options.ranks)};
  if (options.as_root) argv.push_back("--allow-run-as-root");
  if (options.hostfile.empty() && options.ranks > options.local_cores) {
    argv.push_back("--oversubscribe");
  }
  if (options.local_cores <= kSmallHostCores) argv.insert(argv.end(), {"--bind-to", "none"});
  argv.insert(argv.end(), {"--mca", "btl_vader_single_copy_mechanism", "none"});
  if (!options.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", options.hostfile});
  for (const auto& name : forwarded_variables()) argv.insert(argv.end(), {"-x", name});
  if (const char* extra = std::getenv("PIPETRAIN_MPIRUN_ARGS")) {
    std::istringstream words(extra);
    for (std::string word; words >> word;) argv.push_back(word);
  }
  argv.insert(argv.end(), options.command.begin(), options.command.end());
  return argv;
}

}  // namespace pipetrain::launch
