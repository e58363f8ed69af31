#include "pipetrain/comm/stop_signals.h"

#include <ATen/ops/tensor.h>

#include <csignal>
#include <cstdlib>
#include <ctime>

#include "pipetrain/io/atomic_file.h"
#include "pipetrain/io/rank_record.h"

namespace pipetrain::comm {
namespace {

volatile sig_atomic_t deferred_signal = 0;  // the signal DeferredStop holds back; 0: none
volatile sig_atomic_t received = 0;         // it arrived
volatile sig_atomic_t received_at = 0;      // when (CLOCK_MONOTONIC seconds)
// Under `pipetrain launch` a SIGTERM meant for the job comes as SIGUSR2, so a SIGTERM is
// mpirun ending the job (after Ctrl-C, or a failed rank): it stops the rank at once.
volatile sig_atomic_t term_relayed = 0;

void stop_now(int signal) {
  io::remove_unfinished_file();
  io::record_signal(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void crash(int signal) {
  io::record_signal(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

bool deferred(int signal) {
  if (deferred_signal == SIGTERM) return signal == SIGUSR2 || (signal == SIGTERM && !term_relayed);
  return deferred_signal != 0 && signal == deferred_signal;
}

// Seconds in which a repeat of the deferred signal is the same request delivered twice
// (to the process group and through mpirun, say), not a second one.
constexpr int kRepeatSeconds = 2;

sig_atomic_t now_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<sig_atomic_t>(now.tv_sec);
}

void stop_or_defer(int signal) {
  if (!deferred(signal)) {
    stop_now(signal);
    return;
  }
  if (received) {
    if (now_seconds() - received_at > kRepeatSeconds) stop_now(signal);
    return;
  }
  received = 1;
  received_at = now_seconds();
  io::record_signal(signal);  // the launcher knows this rank was told to stop
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

}  // namespace

void install_stop_handlers() {
  for (const int signal : kStopSignals) std::signal(signal, stop_or_defer);
  for (const int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, crash);
}

DeferredStop::DeferredStop(int signal) : signal_(signal) {
  received = 0;
  // Under the launcher its SIGUSR2 is the request; under plain mpirun a SIGTERM is mpirun
  // ending the job (it sends SIGKILL a second later): both stop at once.
  term_relayed = io::started_by_launcher() || std::getenv("OMPI_COMM_WORLD_RANK") ? 1 : 0;
  deferred_signal = signal;
}

DeferredStop::~DeferredStop() {
  deferred_signal = 0;
}

bool DeferredStop::requested(Communicator& world) const {
  if (signal_ == 0) return false;
  at::Tensor any = at::tensor({static_cast<int>(received)}, at::kInt);
  world.all_reduce(any, ReduceOp::kMax);
  return any.item<int>() != 0;
}

}  // namespace pipetrain::comm
