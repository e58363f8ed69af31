#include "launch/run_job.h"

#include <stdlib.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "io/exit_status.h"
#include "io/rank_record.h"
#include "launch/job_ending.h"
#include "launch/signal_filter.h"

namespace pipetrain::launch {
namespace fs = std::filesystem;
namespace {

// A fresh folder under the temporary directory, removed with the object.
class TemporaryFolder {
 public:
  TemporaryFolder() {
    std::error_code error;  // without one the job runs, only without the ranks' accounts
    const fs::path base = fs::temp_directory_path(error);
    std::string pattern = ((error ? fs::path("/tmp") : base) / "pipetrain-ranks-XXXXXX").string();
    if (::mkdtemp(pattern.data())) path_ = pattern;
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;

  const fs::path& path() const { return path_; }  // empty when it could not be made

 private:
  fs::path path_;
};

}  // namespace

int run_job(const LaunchOptions& options) {
  const TemporaryFolder records;
  if (!records.path().empty()) ::setenv("PIPETRAIN_RANK_RECORDS", records.path().c_str(), 1);
  const ChildEnding ending =
      run_forwarding_signals(mpirun_command(options), signal_filter_library());
  if (ending.signal_received == 0 && !records.path().empty()) {
    const std::string line =
        describe_ending(io::read_rank_records(records.path()), options.ranks, ending.status);
    if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  }
  // What a stop signal kept: the job's own line says so when it saved (exit 75).
  if (ending.signal_received != 0 && ending.status != io::kSavedOnSignalExitCode) {
    std::fprintf(stderr, "pipetrain: launch: the job stopped on %s without saving its last step\n",
                 signal_name(ending.signal_received).c_str());
  }
  // A SIGTERM passed on as SIGUSR2 that ended the ranks reads as the SIGTERM it was.
  // Ranks that did not save ended on the SIGUSR2 the signal was passed on as.
  if (ending.signal_received != 0 && ending.status == 128 + SIGUSR2)
    return 128 + ending.signal_received;
  return ending.status;
}

}  // namespace pipetrain::launch
