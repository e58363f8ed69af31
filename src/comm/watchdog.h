#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "pipetrain/comm/deadline.h"

namespace pipetrain::comm {

// Deadlines for work the host does not wait for: a collective queued on a GPU stream that
// the consumer's stream waits on (as ProcessGroupNCCL's). One thread polls every watched
// operation; once one reports an error or outlives its deadline, the watchdog calls its
// failure action once with the one-line diagnostic (by default end_job: the job ends with
// that line, whichever thread is stuck) and stops watching.
class Watchdog {
 public:
  struct Operation {
    std::string what;                    // e.g. "NCCL all_reduce over 2 ranks (ranks 0, 1)"
    std::string context;                 // the issuing thread's wait_context()
    std::function<bool()> done;          // polled on the watchdog's thread
    std::function<std::string()> error;  // non-empty once the operation has failed; may be null
    Seconds timeout{};
  };
  using Failure = std::function<void(const std::string& message)>;

  explicit Watchdog(Failure on_failure,
                    std::chrono::microseconds poll = std::chrono::milliseconds(5));
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // From any thread. Operations leave the watch once done.
  void watch(Operation operation);
  // Operations still watched (also those being polled right now).
  std::size_t watched() const;
  // Blocks until nothing is watched (or the watchdog has failed).
  void drain() const;
  bool failed() const;

  // The process's watchdog, started on first use; it ends the job through end_job. Holders
  // (NCCL communicators) keep it alive past static destruction.
  static std::shared_ptr<Watchdog> shared();

 private:
  struct Entry {
    Operation operation;
    std::chrono::steady_clock::time_point started;
  };
  void run();
  // The failure message if `entry` failed, else empty.
  static std::string check(const Entry& entry, std::chrono::steady_clock::time_point now);

  Failure on_failure_;
  std::chrono::microseconds poll_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::list<Entry> entries_;
  std::size_t polling_ = 0;  // entries taken out of entries_ for the poll in progress
  bool stop_ = false;
  bool failed_ = false;
  std::thread thread_;
};

}  // namespace pipetrain::comm
