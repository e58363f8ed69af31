// Loaded into mpirun by `pipetrain launch` (LD_PRELOAD; see launch/mpirun_command.h), never
// linked. mpirun answers SIGTERM, SIGINT and SIGHUP by killing its ranks a second later, and
// Open MPI refuses to forward them; so a signal sent to every process of a job (`pkill`, a
// batch system's "signal the job", systemd's control-group kill) would end the ranks before
// they could finish their step and save. With this library mpirun keeps its handlers for
// those three signals, but they run only for a signal from the launcher (its parent, which
// sends them to end the job at once) or once the launcher is gone. Any other is passed to
// the launcher, which treats it as if sent to it (the ranks save); when the launcher got the
// same signal itself, it counts the two as one.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace {

using SigactionFunction = int (*)(int, const struct sigaction*, struct sigaction*);

SigactionFunction real_sigaction = nullptr;
pid_t launcher = 0;                // 0 until the filter is installed
struct sigaction wanted[NSIG] {};  // the disposition mpirun asked for, per filtered signal

constexpr int kFiltered[] = {SIGTERM, SIGINT, SIGHUP};

bool filtered(int signal) {
  return signal == SIGTERM || signal == SIGINT || signal == SIGHUP;
}

SigactionFunction real() {
  if (!real_sigaction)
    real_sigaction = reinterpret_cast<SigactionFunction>(::dlsym(RTLD_NEXT, "sigaction"));
  return real_sigaction;
}

// Runs what mpirun asked for, as the kernel would have.
void deliver(int signal, siginfo_t* info, void* context) {
  const struct sigaction& action = wanted[signal];
  if (action.sa_flags & SA_SIGINFO) {
    action.sa_sigaction(signal, info, context);
  } else if (action.sa_handler == SIG_DFL) {
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    real()(signal, &fallback, nullptr);
    ::raise(signal);
  } else if (action.sa_handler != SIG_IGN) {
    action.sa_handler(signal);
  }
}

void filter(int signal, siginfo_t* info, void* context) {
  const bool from_launcher = info != nullptr && info->si_pid == launcher;
  if (from_launcher || ::getppid() != launcher) {
    deliver(signal, info, context);
  } else {
    ::kill(launcher, signal);
  }
}

// Takes this library out of LD_PRELOAD, so that the ranks mpirun starts do not load it.
void leave_preload() {
  Dl_info self{};
  const char* preload = ::getenv("LD_PRELOAD");
  if (!preload || !::dladdr(reinterpret_cast<void*>(&leave_preload), &self) || !self.dli_fname)
    return;
  static char kept[8192];
  size_t used = 0;
  for (const char* at = preload; *at;) {
    const size_t length = ::strcspn(at, ": ");
    const bool ours =
        length == ::strlen(self.dli_fname) && ::strncmp(at, self.dli_fname, length) == 0;
    if (!ours && length > 0 && used + length + 2 < sizeof kept) {
      if (used > 0) kept[used++] = ':';
      ::memcpy(kept + used, at, length);
      used += length;
    }
    at += length;
    if (*at) ++at;
  }
  kept[used] = '\0';
  if (used == 0) {
    ::unsetenv("LD_PRELOAD");
  } else {
    ::setenv("LD_PRELOAD", kept, 1);
  }
}

__attribute__((constructor)) void install_filter() {
  leave_preload();
  if (!real()) return;
  launcher = ::getppid();
  struct sigaction action {};
  action.sa_sigaction = filter;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  for (const int signal : kFiltered) {
    real()(signal, nullptr, &wanted[signal]);
    real()(signal, &action, nullptr);
  }
}

}  // namespace

// mpirun's own calls: for the filtered signals, what it asks for is kept for the filter.
extern "C" int sigaction(int signal, const struct sigaction* action,
                         struct sigaction* old) noexcept {
  if (launcher == 0 || !filtered(signal)) return real()(signal, action, old);
  const struct sigaction before = wanted[signal];  // `action` and `old` may be one struct
  if (action) wanted[signal] = *action;
  if (old) *old = before;
  return 0;
}

extern "C" sighandler_t signal(int signal, sighandler_t handler) noexcept {
  struct sigaction action {};
  action.sa_handler = handler;
  action.sa_flags = SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  struct sigaction old {};
  if (sigaction(signal, &action, &old) != 0) return SIG_ERR;
  return old.sa_handler;  // shares its storage with sa_sigaction
}
