#include "engine/transfer_progress.h"

#include <algorithm>
#include <chrono>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::engine {
namespace {

// Sends in flight are tested every kPollInterval (docs/bench/2026-11-30-poll-pause.md).
constexpr std::chrono::microseconds kPollInterval{100};

}  // namespace

TransferProgress::TransferProgress() : threads_allowed_(comm::mpi_thread_multiple()) {}

TransferProgress::~TransferProgress() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void TransferProgress::start_thread() {
  // Started with the first send left in flight: schedules whose sends block never need it.
  if (threads_allowed_ && !thread_.joinable())
    thread_ = std::thread([this] { poll_until_stopped(); });
}

void TransferProgress::add(comm::PendingSend send) {
  start_thread();
  {
    const std::lock_guard lock(mutex_);
    sends_.push_back(std::move(send));
  }
  wake_.notify_one();
  rethrow_failure();
}

void TransferProgress::complete_sends() {
  const std::lock_guard lock(mutex_);
  for (auto& send : sends_) send.wait();
  sends_.clear();
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void TransferProgress::rethrow_failure() {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void TransferProgress::poll_until_stopped() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || (!sends_.empty() && !failure_); });
    if (stop_) return;
    try {
      // Completed sends free their payloads at once, in any order.
      std::erase_if(sends_, [](comm::PendingSend& send) { return send.test(); });
    } catch (...) {
      failure_ = std::current_exception();  // the sends stay: their buffers may be in use
      continue;
    }
    if (sends_.empty()) continue;
    lock.unlock();
    std::this_thread::sleep_for(kPollInterval);
    lock.lock();
  }
}

}  // namespace pipetrain::engine
