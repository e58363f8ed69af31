#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "pipetrain/comm/tensor_transport.h"

namespace pipetrain::engine {

// Transfers in flight, moved along while the stage computes. MPI moves a large message only
// while both sides are inside an MPI call: a send left alone during a 100 ms forward pass
// holds its receiver up for that long, and so does a receive posted early but not polled.
// With MPI_THREAD_MULTIPLE a helper thread tests the sends and receives every kPollInterval
// until they complete; without it they progress in the stage's own later MPI calls (a
// receive, a collective, complete_sends()).
class TransferProgress {
 public:
  TransferProgress();
  ~TransferProgress();
  TransferProgress(const TransferProgress&) = delete;
  TransferProgress& operator=(const TransferProgress&) = delete;

  // Whether a helper thread moves transfers along.
  bool threaded() const { return threads_allowed_; }

  void add(comm::PendingSend send);
  // Waits (with the communicators' deadlines) for every send added so far; rethrows a
  // failure the helper thread met.
  void complete_sends();

  // Moves `recv` along from now on, until withdraw(recv): the caller keeps it alive and
  // withdraws it before touching it again.
  void add(comm::PendingRecv* recv);
  void withdraw(const comm::PendingRecv* recv);

 private:
  void poll_until_stopped();
  void rethrow_failure();
  void start_thread();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<comm::PendingSend> sends_;
  std::vector<comm::PendingRecv*> recvs_;  // not yet complete, not withdrawn
  std::exception_ptr failure_;
  bool stop_ = false;
  const bool threads_allowed_;  // MPI_THREAD_MULTIPLE
  std::thread thread_;          // started by the first add(), joined first
};

}  // namespace pipetrain::engine
