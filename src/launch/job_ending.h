#pragma once

#include <string>
#include <vector>

#include "io/rank_record.h"

namespace pipetrain::launch {

// The line `pipetrain launch` prints after mpirun returned `mpirun_status`, when no rank
// said why the job ended (see io/rank_record.h); empty when the job succeeded or a rank
// exited with a status of its own (it printed its line). In order: the lowest rank that
// recorded nothing since it started (killed by an uncatchable signal: SIGKILL, the kernel's
// out-of-memory killer; or gone through a plain exit), a rank that died of a crash signal
// (SIGSEGV, SIGBUS, SIGABRT, ...), the rank first sent a stop signal (SIGTERM, SIGINT,
// SIGHUP) from outside the job. With fewer accounts than the job's `job_ranks` ranks (ranks
// on other hosts keep theirs there), no stop signal is blamed: the count is said instead.
std::string describe_ending(const std::vector<io::RankEnding>& ranks, int job_ranks,
                            int mpirun_status);

// "SIGKILL" for 9, else "signal N".
std::string signal_name(int signal);

}  // namespace pipetrain::launch
