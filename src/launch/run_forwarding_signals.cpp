#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "io/rank_record.h"
#include "launch/mpirun_command.h"
#include "launch/signal_filter.h"

namespace pipetrain::launch {
namespace {

volatile sig_atomic_t child_pid = 0;

volatile sig_atomic_t received = 0;
char stop_request_path[4096] = {};  // FOLDER/stop-request, made before any signal

void record_stop_request(const char* name) {  // async-signal-safe
  if (!stop_request_path[0]) return;
  const int fd = ::open(stop_request_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  if (::write(fd, name, std::strlen(name)) < 0) {
    // the ranks then name the signal they were given; nothing else to do here
  }
  ::close(fd);
}

void say(std::initializer_list<const char*> parts) {  // async-signal-safe
  for (const char* part : parts) {
    if (::write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
  }
}

// Seconds within which a stop signal mpirun passed on (see launch/signal_filter.h) and the
// same signal sent to the launcher itself are one request: a signal to every process of
// the job reaches both.
constexpr int kSameRequestSeconds = 2;
constexpr int kNever = -1000;
volatile sig_atomic_t direct_at[NSIG] = {};   // when each signal last came from outside
volatile sig_atomic_t relayed_at[NSIG] = {};  // when mpirun last passed each one on

sig_atomic_t now_seconds() {  // async-signal-safe
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<sig_atomic_t>(now.tv_sec);
}

// Whether this signal is the other half of a request already taken.
bool seen_already(int signal, bool relayed) {
  const sig_atomic_t now = now_seconds();
  const sig_atomic_t other = relayed ? direct_at[signal] : relayed_at[signal];
  if (other != kNever && now - other <= kSameRequestSeconds) return true;
  (relayed ? relayed_at : direct_at)[signal] = now;
  return false;
}

// Passes the signal on, and says once why the job is ending. SIGTERM goes as SIGUSR2 (see
// the header), and so do a first SIGINT or SIGHUP: ranks saving on SIGTERM finish their
// step and save. A second SIGINT or SIGHUP goes as itself: mpirun ends the job at once.
void forward(int signal, siginfo_t* info, void*) {
  if (signal == SIGUSR1 || signal == SIGUSR2) {  // for the ranks (e.g. save_on_signal)
    if (child_pid > 0) ::kill(child_pid, signal);
    return;
  }
  const bool relayed = child_pid > 0 && info != nullptr && info->si_pid == child_pid;
  if (seen_already(signal, relayed)) return;
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
  const bool again = received != 0;
  if (!again) {
    received = signal;
    record_stop_request(name);  // before the ranks hear of it
    if (signal == SIGTERM) {
      say({"pipetrain: launch: passing SIGTERM to the job\n"});
    } else {
      say({"pipetrain: launch: passing ", name, " to the job (", name,
           " again stops it at once)\n"});
    }
  }
  const bool at_once = again && signal != SIGTERM;
  if (child_pid > 0) ::kill(child_pid, at_once ? signal : SIGUSR2);
}

}  // namespace

ChildEnding run_forwarding_signals(const std::vector<std::string>& argv,
                                   const std::string& preload) {
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> variables;
  for (char** entry = environ; *entry; ++entry) variables.emplace_back(*entry);
  variables = with_preload(std::move(variables), preload);
  std::vector<char*> environment;
  for (auto& variable : variables) environment.push_back(variable.data());
  environment.push_back(nullptr);

  // Handlers first, and the stop signals blocked until child_pid is set: one that arrives
  // meanwhile (the child may run and signal before the parent returns from fork) waits, and
  // is then passed on like any other. The child unblocks them just before exec.
  if (const std::string path = io::stop_request_path(); path.size() < sizeof stop_request_path)
    std::memcpy(stop_request_path, path.c_str(), path.size() + 1);
  received = 0;
  for (int signal = 0; signal < NSIG; ++signal) direct_at[signal] = relayed_at[signal] = kNever;
  struct sigaction action {};
  action.sa_sigaction = forward;
  action.sa_flags = SA_SIGINFO;
  ::sigfillset(&action.sa_mask);  // one handler at a time: they share the state above
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2})
    ::sigaction(signal, &action, nullptr);
  sigset_t blocked, unblocked;
  ::sigemptyset(&blocked);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaddset(&blocked, signal);
  ::sigprocmask(SIG_BLOCK, &blocked, &unblocked);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int error = errno;
    ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(error));
  }
  if (pid == 0) {
    // Killed with the launcher, even by SIGKILL (which cannot be forwarded): mpirun takes
    // its ranks down when it gets SIGTERM.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the launcher died before prctl
    // A process group of its own: a terminal's Ctrl-C, or a signal to the launcher's group,
    // reaches the launcher alone, which passes it on as above (mpirun would end the job at
    // once). A background group must not read the terminal (SIGTTIN would stop it).
    ::setpgid(0, 0);
    if (::isatty(STDIN_FILENO)) {
      const int none = ::open("/dev/null", O_RDONLY);
      if (none >= 0 && none != STDIN_FILENO) {
        ::dup2(none, STDIN_FILENO);
        ::close(none);
      }
    }
    // The launcher's handlers are not the child's (with child_pid 0 here they would note a
    // parent-death SIGTERM and carry on): the defaults until exec sets its program's.
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::signal(signal, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);
    ::execvpe(args[0], args.data(), environment.data());
    std::fprintf(stderr, "pipetrain: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  child_pid = pid;
  ::sigprocmask(SIG_SETMASK, &unblocked, nullptr);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error(std::string("waitpid failed: ") + std::strerror(errno));
  }
  child_pid = 0;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), received};
}

}  // namespace pipetrain::launch
