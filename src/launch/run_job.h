#pragma once

#include "launch/mpirun_command.h"

namespace pipetrain::launch {

// Runs the job mpirun_command(options) describes, its ranks keeping accounts of themselves
// in a temporary folder (see io/rank_record.h) that is removed afterwards, and prints the
// line describe_ending gives when the job ended without a rank saying why. Returns
// mpirun's exit status.
int run_job(const LaunchOptions& options);

}  // namespace pipetrain::launch
