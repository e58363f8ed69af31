#pragma once

#include "pipetrain/comm/communicator.h"

// How a rank answers signals. Ranks stay silent when a signal ends them: mpirun ends the
// other ranks with SIGTERM after one fails, and the failing rank, or the launcher (from the
// ranks' accounts, see io/rank_record.h), says why.
namespace pipetrain::comm {

// Stop signals (SIGINT, SIGTERM, SIGHUP, SIGUSR1, and SIGUSR2, which `pipetrain launch` sends in
// SIGTERM's place) end the rank at once: the temporary file of an unfinished write removed,
// the signal recorded, then the default action (the exit status shows the signal). Crash
// signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) are recorded, then take their default action.
void install_stop_handlers();

// While it lives, `signal` (SIGTERM or SIGUSR1) no longer ends the rank: it is noted, for
// the caller to stop at a point of its choosing (the trainer: at the end of a step, after
// saving a checkpoint). A second one (more than 2 s later: one request may arrive twice)
// ends the rank at once. Signal 0: nothing is deferred. Under mpirun (with or without
// `pipetrain launch`), deferring SIGTERM defers the launcher's SIGUSR2 and a SIGTERM, SIGINT
// or SIGHUP from anyone but the rank's parent (a signal to every process of the job); a
// SIGTERM from the parent is mpirun ending the job (after a second Ctrl-C, or after a rank
// failed) and still ends the rank. Under srun (or any other starter) a SIGTERM is deferred.
class DeferredStop {
 public:
  explicit DeferredStop(int signal);
  ~DeferredStop();  // the signal ends the rank at once again, unless one was received
  DeferredStop(const DeferredStop&) = delete;
  DeferredStop& operator=(const DeferredStop&) = delete;

  // Collective over `world` (every rank gets the same answer): whether any rank has
  // received the signal.
  bool requested(Communicator& world) const;
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace pipetrain::comm
