#include "pipetrain/comm/stop_signals.h"

#include <ATen/ops/tensor.h>

#include <csignal>

#include "pipetrain/io/atomic_file.h"
#include "pipetrain/io/rank_record.h"

namespace pipetrain::comm {
namespace {

volatile sig_atomic_t deferred_signal = 0;  // the signal DeferredStop holds back; 0: none
volatile sig_atomic_t received = 0;         // it arrived
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
  if (deferred_signal == SIGTERM)
    return signal == SIGUSR2 || (signal == SIGTERM && !term_relayed);
  return deferred_signal != 0 && signal == deferred_signal;
}

void stop_or_defer(int signal) {
  if (!deferred(signal) || received) {
    stop_now(signal);
    return;
  }
  received = 1;
  io::record_signal(signal);  // the launcher knows this rank was told to stop
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR2};

}  // namespace

void install_stop_handlers() {
  for (const int signal : kStopSignals) std::signal(signal, stop_or_defer);
  for (const int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, crash);
}

DeferredStop::DeferredStop(int signal) : signal_(signal) {
  received = 0;
  term_relayed = io::started_by_launcher() ? 1 : 0;
  deferred_signal = signal;
  if (signal == SIGUSR1) std::signal(SIGUSR1, stop_or_defer);
}

DeferredStop::~DeferredStop() {
  deferred_signal = 0;
  if (signal_ == SIGUSR1) std::signal(SIGUSR1, SIG_DFL);
}

bool DeferredStop::requested(Communicator& world) const {
  if (signal_ == 0) return false;
  at::Tensor any = at::tensor({static_cast<int>(received)}, at::kInt);
  world.all_reduce(any, ReduceOp::kMax);
  return any.item<int>() != 0;
}

}  // namespace pipetrain::comm
