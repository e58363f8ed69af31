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

struct ChildEnding {
  int status = 0;           // exit status, 128 + signal if a signal ended it
  int signal_received = 0;  // the first stop signal this process passed on; 0: none
};

// Runs `argv` (mpirun) as a child process in a process group of its own that dies with this
// one, with `preload` (when not empty) loaded into it first (see launch/signal_filter.h),
// passing SIGUSR1 and SIGUSR2 on to it, and SIGTERM, and a first SIGINT or SIGHUP, as
// SIGUSR2: mpirun answers those three by killing the job (its ranks get SIGTERM, then SIGKILL
// a second later), but passes SIGUSR1 and SIGUSR2 to every rank, whose handlers read SIGUSR2
// as SIGTERM (a rank saving on SIGTERM gets to finish its step and save). A second SIGINT or
// SIGHUP is passed on as itself and ends the job at once. A stop signal the child passes
// back (the preloaded filter does) counts as one with the same signal sent here within 2 s:
// a signal to every process of the job is one request. Prints one line when it passes
// SIGINT, SIGTERM or SIGHUP on. Throws if the child cannot start.
ChildEnding run_forwarding_signals(const std::vector<std::string>& argv,
                                   const std::string& preload = {});

}  // namespace pipetrain::launch
