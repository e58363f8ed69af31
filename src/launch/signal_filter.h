#pragma once

#include <string>
#include <vector>

namespace pipetrain::launch {

// The library `pipetrain launch` loads into mpirun (LD_PRELOAD) so that mpirun heeds
// SIGTERM, SIGINT and SIGHUP only from the launcher and passes any other on to it (see
// src/launch/mpirun_signal_filter.cpp): a signal sent to every process of the job then ends
// it as one sent to the launcher does. Looked for next to the running command, then in the
// install's library folder beside its bin; empty when neither has it (mpirun then runs
// without it, and a signal that reaches mpirun itself ends the ranks without saving).
std::string signal_filter_library();

// The environment for mpirun: `environment` with `library` first in LD_PRELOAD (kept after
// it when the caller set one). Unchanged when `library` is empty.
std::vector<std::string> with_preload(std::vector<std::string> environment,
                                      const std::string& library);

}  // namespace pipetrain::launch
