#include "comm/stop_signals.h"

#include <ATen/ops/tensor.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/rank_record.h"

namespace pipetrain::comm {
namespace {

volatile sig_atomic_t deferred_signal = 0;  // the signal DeferredStop holds back; 0: none
volatile sig_atomic_t received = 0;         // it arrived
volatile sig_atomic_t received_at = 0;      // when (CLOCK_MONOTONIC seconds)
volatile sig_atomic_t taken = 0;            // the job agreed to stop (on any rank's request)
// Under mpirun (with or without `pipetrain launch`) a SIGTERM from the rank's parent (mpirun,
// or Open MPI's daemon on another host) is the job ending (after a second Ctrl-C, or a
// failed rank): it stops the rank at once. A stop signal from anyone else is a request to
// stop: the launcher's SIGUSR2, or a SIGTERM, SIGINT or SIGHUP sent to every process of the
// job (the launcher keeps mpirun from ending the job on it, see launch/signal_filter.h).
volatile sig_atomic_t under_mpirun = 0;

void stop_now(int signal) {
  io::remove_unfinished_file();
  io::record_signal(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

// RECORDS/fault-said under `pipetrain launch`: ranks reading the same file fault together,
// and the first to make this file says why for the job (made before any signal).
char fault_said_path[4096] = {};

// Whether this rank says the job's data fault: the first to claim it, or every rank where
// there is nothing to claim it in (plain mpirun, or another host). Async-signal-safe.
bool first_to_say() {
  if (!fault_said_path[0]) return true;
  const int fd = ::open(fault_said_path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd >= 0) ::close(fd);
  return fd >= 0 || errno != EEXIST;
}

void say(const char* text) {  // async-signal-safe
  if (::write(STDERR_FILENO, text, std::strlen(text)) < 0) return;
}

void crash(int signal, siginfo_t* info, void*) {
  // A mapped data file that shrank under the job: its pages past the new end fault (a
  // fault the kernel raised: si_code > 0, so si_addr is an address). Said, and the rank
  // ends as one that failed with a line of its own.
  const bool fault = signal == SIGBUS && info != nullptr && info->si_code > 0;
  if (const char* file = fault ? io::mapped_file_at(info->si_addr) : nullptr) {
    io::remove_unfinished_file();
    if (first_to_say()) {
      say("pipetrain: ");
      say(file);
      say(" changed while the job read it (it shrank, or its storage failed: SIGBUS); files a"
          " job reads must not change until it ends\n");
    }
    io::record_exit(1);
    ::_exit(1);
  }
  io::record_signal(signal);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

bool deferred(int signal, const siginfo_t* info) {
  if (deferred_signal == SIGTERM) {
    if (signal == SIGUSR2) return true;
    if (signal != SIGTERM && signal != SIGINT && signal != SIGHUP) return false;
    if (!under_mpirun) return signal == SIGTERM;
    return info == nullptr || info->si_pid != ::getppid();
  }
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

void stop_or_defer(int signal, siginfo_t* info, void*) {
  if (!deferred(signal, info)) {
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
  if (const char* records = std::getenv("PIPETRAIN_RANK_RECORDS"))
    std::snprintf(fault_said_path, sizeof fault_said_path, "%s/fault-said", records);
  struct sigaction action {};
  action.sa_sigaction = stop_or_defer;
  action.sa_flags = SA_SIGINFO;
  ::sigemptyset(&action.sa_mask);
  for (const int signal : kStopSignals) ::sigaction(signal, &action, nullptr);
  struct sigaction crashing {};
  crashing.sa_sigaction = crash;
  crashing.sa_flags = SA_SIGINFO;
  ::sigemptyset(&crashing.sa_mask);
  for (const int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    ::sigaction(signal, &crashing, nullptr);
}

DeferredStop::DeferredStop(int signal) : signal_(signal) {
  received = 0;
  taken = 0;
  under_mpirun = io::started_by_launcher() || std::getenv("OMPI_COMM_WORLD_RANK") ? 1 : 0;
  deferred_signal = signal;
}

DeferredStop::~DeferredStop() {
  // A rank that took a stop request is on its way out (saved, exit 75): a late copy of the
  // same request (a signal sent to every process of the job reaches the rank directly and
  // again through mpirun) must not end it by that signal now. A second request still
  // does, after kRepeatSeconds, as during the step. So for a rank that stops because
  // another rank got the request first: its own copy may still be on its way.
  if (!received && !taken) deferred_signal = 0;
}

bool DeferredStop::requested(Communicator& world) const {
  if (signal_ == 0) return false;
  at::Tensor any = at::tensor({static_cast<int>(received)}, at::kInt);
  world.all_reduce(any, ReduceOp::kMax);
  if (any.item<int>() == 0) return false;
  taken = 1;
  return true;
}

}  // namespace pipetrain::comm
