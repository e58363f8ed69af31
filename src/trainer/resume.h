#pragma once

#include <nlohmann/json.hpp>

#include <string>

// Jobs that pick up where they stopped: a job started again with the same command (a
// requeued SLURM job, a preempted node's) resumes from the newest complete checkpoint in its
// save folder, as torchtitan and Megatron do.
namespace pipetrain::trainer {

// Sets `load` in `config` (a train config, command-line options applied) to its `save`
// folder when that folder holds a complete checkpoint (`latest`) and `overwrite` is not set,
// also over a `load` naming another folder when that checkpoint's run started there (a
// fine-tune's base, started_from below); drops a `load` that names the save folder before
// its first checkpoint.
// Returns the one line that says which (empty without `save`).
std::string resolve_resume(nlohmann::json& config);

// Where the run a job continues started: `load` when it names another folder than `save`
// (a base), else what the loaded checkpoint says (empty: a fresh start). Saved in every
// checkpoint's client state as "started_from".
std::string started_from(const std::string& load, const std::string& save);

// Resuming (`load` a checkpoint past step 0) at another data-parallel size keeps the
// checkpoint's global batch, as DeepSpeed's elastic arithmetic does: unless `config` sets
// train_batch_size itself, it gets the checkpoint's, and the gradient accumulation steps
// (or the micro-batch, when only they are set) follow from it at the new size; batch sizes
// that cannot divide are refused in one line (resolve_batch shows the arithmetic). Returns
// the one line that says so, empty when nothing changed.
std::string keep_global_batch(nlohmann::json& config, int world_size);

}  // namespace pipetrain::trainer
