#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "pipetrain/launch/mpirun_command.h"

namespace pipetrain::launch {
namespace {

volatile sig_atomic_t child_pid = 0;

volatile sig_atomic_t received = 0;

// Passes the signal on (SIGTERM as SIGUSR2, see the header), and says once
// (async-signal-safe) why the job is ending.
void forward(int signal) {
  if (signal == SIGUSR1 || signal == SIGUSR2) {  // for the ranks (e.g. save_on_signal)
    if (child_pid > 0) ::kill(child_pid, signal);
    return;
  }
  if (!received) {
    received = signal;
    const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
    for (const char* part : {"pipetrain: launch: passing ", name, " to the job\n"}) {
      if (::write(STDERR_FILENO, part, std::strlen(part)) < 0) break;
    }
  }
  if (child_pid > 0) ::kill(child_pid, signal == SIGTERM ? SIGUSR2 : signal);
}

}  // namespace

ChildEnding run_forwarding_signals(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Killed with the launcher, even by SIGKILL (which cannot be forwarded): mpirun takes
    // its ranks down when it gets SIGTERM.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the launcher died before prctl
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "pipetrain: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  child_pid = pid;
  struct sigaction action {};
  action.sa_handler = forward;
  ::sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2})
    ::sigaction(signal, &action, nullptr);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error(std::string("waitpid failed: ") + std::strerror(errno));
  }
  child_pid = 0;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), received};
}

}  // namespace pipetrain::launch
