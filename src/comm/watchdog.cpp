#include "comm/watchdog.h"

#include <cstdio>
#include <utility>

#include "comm/job_failure.h"

namespace pipetrain::comm {

Watchdog::Watchdog(Failure on_failure, std::chrono::microseconds poll)
    : on_failure_(std::move(on_failure)), poll_(poll), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::watch(Operation operation) {
  {
    const std::lock_guard lock(mutex_);
    entries_.push_back({std::move(operation), std::chrono::steady_clock::now()});
  }
  changed_.notify_all();
}

std::size_t Watchdog::watched() const {
  const std::lock_guard lock(mutex_);
  return entries_.size() + polling_;
}

void Watchdog::drain() const {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return (entries_.empty() && polling_ == 0) || failed_; });
}

bool Watchdog::failed() const {
  const std::lock_guard lock(mutex_);
  return failed_;
}

std::string Watchdog::check(const Entry& entry, std::chrono::steady_clock::time_point now) {
  const Operation& op = entry.operation;
  const std::string where = op.context.empty() ? "" : " [" + op.context + "]";
  try {
    if (op.error) {
      if (const std::string error = op.error(); !error.empty())
        return op.what + where + " failed: " + error;
    }
  } catch (const std::exception& e) {
    return op.what + where + " failed: " + e.what();
  }
  const Seconds waited = now - entry.started;
  if (waited < op.timeout) return {};
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", waited.count());
  return std::string("waited ") + seconds + " s for " + op.what + where + ": deadline exceeded";
}

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (entries_.empty() || failed_) {
      changed_.wait(lock, [this] { return stop_ || (!entries_.empty() && !failed_); });
      continue;
    }
    // Polled without the lock, so issuing threads never wait on a poll.
    std::list<Entry> polled;
    polled.splice(polled.end(), entries_);
    polling_ = polled.size();
    lock.unlock();
    std::string failure;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = polled.begin(); it != polled.end() && failure.empty();) {
      bool done = false;
      try {
        done = it->operation.done();
      } catch (const std::exception& e) {  // e.g. a CUDA error: the operation failed
        failure = it->operation.what + " failed: " + e.what();
        break;
      }
      if (done) {
        it = polled.erase(it);
        continue;
      }
      failure = check(*it, now);
      ++it;
    }
    lock.lock();
    entries_.splice(entries_.begin(), polled);  // oldest first, before those added meanwhile
    polling_ = 0;
    if (!failure.empty()) {
      lock.unlock();
      on_failure_(failure);  // end_job does not return
      lock.lock();
      failed_ = true;
      changed_.notify_all();
      continue;
    }
    changed_.notify_all();
    if (!entries_.empty()) {
      lock.unlock();
      std::this_thread::sleep_for(poll_);
      lock.lock();
    }
  }
}

std::shared_ptr<Watchdog> Watchdog::shared() {
  static const auto watchdog =
      std::make_shared<Watchdog>([](const std::string& message) { end_job(message, 1); });
  return watchdog;
}

}  // namespace pipetrain::comm
