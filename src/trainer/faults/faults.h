#pragma once

#include "pipetrain/engine/pipeline_engine.h"

namespace pipetrain::trainer {

// The faults a test asks for in the environment, attached through the seams built for them:
// PIPETRAIN_FAULT (see engine/fault_injection.h) through the engine's hooks, and
// PIPETRAIN_FAULT_KILL_IN_SAVE=<rank> (that rank dies by SIGKILL right after writing its
// first layer's files, as a crashed machine would) through the checkpoint's. Neither the
// engine nor the checkpoint code reads the environment. InputError for a malformed plan.
void inject_faults_from_environment(engine::PipelineEngine& engine);

}  // namespace pipetrain::trainer
