#include "pipetrain/engine/transfer_progress.h"

#include <algorithm>
#include <chrono>

#include "pipetrain/comm/mpi_communicator.h"

namespace pipetrain::engine {
namespace {

// Sends in flight are tested every kPollInterval (the study under Deadlines in the README).
// Receives posted ahead wait for their sender most of the time: while nothing but such
// receives is in flight, the pause doubles after each round in which none completed, up to
// kIdleInterval, so the thread takes little from the stage's own compute.
constexpr std::chrono::microseconds kPollInterval{100};
constexpr std::chrono::microseconds kIdleInterval{1600};

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
  // Started with the first transfer left in flight: schedules whose sends block and that
  // post no receive ahead never need it.
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

void TransferProgress::add(comm::PendingRecv* recv) {
  start_thread();
  {
    const std::lock_guard lock(mutex_);
    recvs_.push_back(recv);
  }
  wake_.notify_one();
}

void TransferProgress::withdraw(const comm::PendingRecv* recv) {
  const std::lock_guard lock(mutex_);
  std::erase(recvs_, recv);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void TransferProgress::rethrow_failure() {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void TransferProgress::poll_until_stopped() {
  std::unique_lock lock(mutex_);
  auto pause = kPollInterval;
  while (true) {
    wake_.wait(lock,
               [this] { return stop_ || ((!sends_.empty() || !recvs_.empty()) && !failure_); });
    if (stop_) return;
    const std::size_t recvs_before = recvs_.size();
    try {
      // Completed sends free their payloads at once, in any order; a completed receive
      // is left alone (its owner's withdraw() then finds nothing to remove).
      std::erase_if(sends_, [](comm::PendingSend& send) { return send.test(); });
      std::erase_if(recvs_, [](comm::PendingRecv* recv) { return recv->test(); });
    } catch (...) {
      failure_ = std::current_exception();  // the transfers stay: their buffers may be in use
      continue;
    }
    if (sends_.empty() && recvs_.empty()) continue;
    const bool idle = sends_.empty() && recvs_.size() == recvs_before;
    pause = idle ? std::min(2 * pause, kIdleInterval) : kPollInterval;
    lock.unlock();
    std::this_thread::sleep_for(pause);
    lock.lock();
  }
}

}  // namespace pipetrain::engine
