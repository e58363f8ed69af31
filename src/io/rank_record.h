#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

// A rank's account of itself for `pipetrain launch`, which reads the accounts after mpirun
// returns to name a rank that died without a word (killed by SIGKILL or crashed): mpirun
// runs with --quiet, so it says nothing itself. The launcher names the folder in
// PIPETRAIN_RANK_RECORDS; without it (plain mpirun, srun) every call here does nothing.
// FOLDER/rank-R holds who the rank is ("host pid identity"); FOLDER/rank-R.end how it
// ended, written by signal handlers too.
namespace pipetrain::io {

// Whether `pipetrain launch` started this process (it names the accounts' folder).
bool started_by_launcher();

// Starts this rank's account (after MPI_Init, once the rank is known).
void open_rank_record(int rank);
// Rewrites who this rank is, e.g. "rank 3 (pipe=1 data=1)" once the topology is known.
void describe_rank(const std::string& identity);
// How the rank ended, or a signal it received (which may not end it: a stop deferred to the
// end of a step is recorded too, so a rank later killed with SIGKILL is known to have been
// signalled first). Async-signal-safe.
void record_exit(int status) noexcept;
void record_signal(int signal) noexcept;

// The launcher's stop request: the name of the first SIGTERM, SIGINT or SIGHUP it passed on
// (all reach the ranks as SIGUSR2), which its handler writes to stop_request_path() (empty
// without the folder); stop_request() reads it back, empty when there was none.
std::string stop_request_path();
std::string stop_request();

struct RankEnding {
  enum class How { kUnknown, kExited, kSignalled };
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  std::string identity;
  How how = How::kUnknown;  // kUnknown: started, and nothing recorded since (e.g. SIGKILL)
  int code = 0;             // exit status or signal number
  int64_t when_ns = 0;      // CLOCK_MONOTONIC at the signal
};

// The accounts in `folder`, in rank order; ranks that never started one are absent.
std::vector<RankEnding> read_rank_records(const std::filesystem::path& folder);

}  // namespace pipetrain::io
