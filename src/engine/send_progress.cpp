#include "pipetrain/engine/send_progress.h"

#include <chrono>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::engine {
namespace {

constexpr std::chrono::microseconds kPollInterval{100};

}  // namespace

SendProgress::SendProgress() : threads_allowed_(comm::mpi_thread_multiple()) {}

SendProgress::~SendProgress() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SendProgress::add(comm::PendingSend send) {
  // Started with the first deferred send: schedules whose sends block never need it.
  if (threads_allowed_ && !thread_.joinable())
    thread_ = std::thread([this] { poll_until_stopped(); });
  {
    const std::lock_guard lock(mutex_);
    in_flight_.push_back(std::move(send));
  }
  wake_.notify_one();
  rethrow_failure();
}

void SendProgress::complete() {
  const std::lock_guard lock(mutex_);
  for (auto& send : in_flight_) send.wait();
  in_flight_.clear();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void SendProgress::rethrow_failure() {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void SendProgress::poll_until_stopped() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || (!in_flight_.empty() && !failure_); });
    if (stop_) return;
    try {
      // Completed sends free their payloads at once, in any order.
      std::erase_if(in_flight_, [](comm::PendingSend& send) { return send.test(); });
    } catch (...) {
      failure_ = std::current_exception();  // the sends stay: their buffers may be in use
      continue;
    }
    if (in_flight_.empty()) continue;
    lock.unlock();
    std::this_thread::sleep_for(kPollInterval);
    lock.lock();
  }
}

}  // namespace pipetrain::engine
