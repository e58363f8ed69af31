#pragma once

#include <string>
#include <vector>

namespace pipetrain::launch {

struct LaunchOptions {
  int ranks = 1;
  std::string hostfile{};              // empty: all ranks on this host
  std::vector<std::string> command{};  // program and its arguments
  int local_cores = 1;                 // cores of this host
  bool as_root = false;
};

// The mpirun command line for a job: root allowed when running as root, oversubscription
// when a single host has fewer cores than ranks, no core binding on small hosts, shared
// memory without the single-copy mechanism containers forbid, and PIPETRAIN_* / OMP_*
// variables forwarded to every host. PIPETRAIN_MPIRUN_ARGS (split on spaces) goes before
// the program. Throws InputError for ranks < 1, a missing hostfile or no program.
std::vector<std::string> mpirun_command(const LaunchOptions& options);

// Runs `argv` as a child process, forwarding SIGINT, SIGTERM and SIGHUP to it, and returns
// its exit status (128 + signal if a signal ended it). Throws if it cannot start.
int run_forwarding_signals(const std::vector<std::string>& argv);

}  // namespace pipetrain::launch
