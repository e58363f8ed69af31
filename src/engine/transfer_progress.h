#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "pipetrain/comm/tensor_transport.h"

namespace pipetrain::engine {

// Sends in flight, moved along while the stage computes. MPI moves a large message only
// while both sides are inside an MPI call: a send left alone during a 100 ms forward pass
// holds its receiver up for that long. With MPI_THREAD_MULTIPLE a helper thread tests the
// sends every kPollInterval until they complete; without it they progress in the stage's
// own later MPI calls (a receive, a collective, complete_sends()).
class TransferProgress {
 public:
  TransferProgress();
  ~TransferProgress();
  TransferProgress(const TransferProgress&) = delete;
  TransferProgress& operator=(const TransferProgress&) = delete;

  void add(comm::PendingSend send);
  // Waits (with the communicators' deadlines) for every send added so far; rethrows a
  // failure the helper thread met.
  void complete_sends();

 private:
  void poll_until_stopped();
  void rethrow_failure();
  void start_thread();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<comm::PendingSend> sends_;
  std::exception_ptr failure_;
  bool stop_ = false;
  const bool threads_allowed_;  // MPI_THREAD_MULTIPLE
  std::thread thread_;          // started by the first add(), joined first
};

}  // namespace pipetrain::engine
