#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/exit_status.h"
#include "trainer/trainer_config.h"

namespace pipetrain::trainer {

// The exit status of a job that `save_on_signal` stopped after saving a checkpoint:
// EX_TEMPFAIL of sysexits.h, "try again later" (resume with --load).
using io::kSavedOnSignalExitCode;

// `pipetrain train`, run on every rank (inside run_rank): builds the job from the config (a
// file's JSON with the command line's overrides), trains for train_iters steps with
// evaluation, checkpoints, logs and a final sample. Returns the exit code: 0, or
// kSavedOnSignalExitCode.
int train(const nlohmann::json& config_file);

// `pipetrain eval`: the validation loss of a checkpoint, printed by rank 0.
int evaluate_checkpoint(const std::string& checkpoint, std::optional<int64_t> eval_iters);

}  // namespace pipetrain::trainer
