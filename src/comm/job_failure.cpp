#include "comm/job_failure.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <utility>

#include "io/rank_record.h"
#include "pipetrain/comm/deadline.h"

namespace pipetrain::comm {
namespace {

std::atomic<bool> failed{false};
std::atomic<int> destroyed_count{0}, left_count{0};

std::mutex& reason_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::string& reason_storage() {
  static std::string reason;
  return reason;
}

void abort_through_mpi(const std::string& message, int exit_code) {
  std::fprintf(stderr, "pipetrain: %s: %s\n", rank_identity().c_str(), message.c_str());
  std::fflush(stderr);
  io::record_exit(exit_code);
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

JobEnder& ender() {
  static JobEnder action = abort_through_mpi;
  return action;
}

}  // namespace

void mark_job_failed(const std::string& reason) {
  {
    const std::lock_guard lock(reason_mutex());
    if (reason_storage().empty()) reason_storage() = reason.empty() ? "failed" : reason;
  }
  failed.store(true);
}

bool job_failed() {
  return failed.load();
}

std::string job_failure_reason() {
  const std::lock_guard lock(reason_mutex());
  return reason_storage();
}

bool collective_teardown_allowed() {
  return !job_failed() && std::uncaught_exceptions() == 0;
}

void PeerTeardown::end() {
  if (!destroy_) return;
  auto destroy = std::move(destroy_);
  destroy_ = nullptr;
  if (collective_teardown_allowed()) {
    destroy();
    ++destroyed_count;
  } else {
    ++left_count;
  }
}

int PeerTeardown::destroyed() {
  return destroyed_count.load();
}
int PeerTeardown::left() {
  return left_count.load();
}

void end_job(const std::string& message, int exit_code) {
  mark_job_failed(message);
  ender()(message, exit_code);
  std::_Exit(exit_code);
}

JobEnder set_job_ender(JobEnder action) {
  return std::exchange(ender(), std::move(action));
}

}  // namespace pipetrain::comm
