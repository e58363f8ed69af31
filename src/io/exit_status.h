#pragma once

namespace pipetrain::io {

// The exit status of a job that finished its step and saved a checkpoint on a stop signal
// (EX_TEMPFAIL: try again later, resuming from it). The launcher reads it as "kept".
inline constexpr int kSavedOnSignalExitCode = 75;

}  // namespace pipetrain::io
