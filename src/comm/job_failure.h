#pragma once

#include <functional>
#include <string>

// When a step fails on some ranks, the others may be gone or stuck: nothing that needs every
// rank of a group may run any more. NCCL's ncclCommDestroy and ncclCommAbort are such calls
// ("all ranks ... should call to avoid a hang", NVIDIA/nccl#863), so a failed job leaves its
// NCCL communicators as they are and ends through MPI_Abort, which needs no peer.
namespace pipetrain::comm {

// Marks this rank's job failed (a deadline passed, NCCL reported an error, an exception left
// a step that had NCCL work queued). Never undone; the first reason is kept.
void mark_job_failed(const std::string& reason);
bool job_failed();
// The first reason given to mark_job_failed, empty while the job has not failed.
std::string job_failure_reason();

// Whether a communicator whose teardown needs its peers may run that teardown now: not once
// the job failed, nor while an exception unwinds (the failure may be on another rank).
bool collective_teardown_allowed();

// How a communicator that needs its peers to end is ended. Its destructor calls end(): the
// collective teardown where collective_teardown_allowed(), else nothing (the process is
// about to end through MPI_Abort; the peers' resources go with it). Counts both, for tests.
class PeerTeardown {
 public:
  explicit PeerTeardown(std::function<void()> destroy) : destroy_(std::move(destroy)) {}
  PeerTeardown(const PeerTeardown&) = delete;
  PeerTeardown& operator=(const PeerTeardown&) = delete;
  ~PeerTeardown() { end(); }

  // Idempotent: the first call decides.
  void end();

  static int destroyed();  // teardowns run, by every PeerTeardown of this process
  static int left();       // teardowns skipped

 private:
  std::function<void()> destroy_;
};

// Ends the whole job at once from any thread: prints "pipetrain: <rank identity>: <message>"
// as one line, records the exit code, marks the job failed and calls MPI_Abort. Tests may
// replace what it does (set_job_ender); the default is the one run_rank uses.
[[noreturn]] void end_job(const std::string& message, int exit_code = 1);
using JobEnder = std::function<void(const std::string& message, int exit_code)>;
// Replaces end_job's action (a test's recorder); returns the previous one. If the action
// returns, end_job then calls std::_Exit(exit_code).
JobEnder set_job_ender(JobEnder ender);

}  // namespace pipetrain::comm
