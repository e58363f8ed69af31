#pragma once

#include "pipetrain/trainer/trainer_config.h"

namespace pipetrain::trainer {

// Before any work: every output the trainer will write (save, trace, log.*) must be
// writable where it points. A file's folder must exist and be writable; a folder's nearest
// existing ancestor must be a writable folder (it is created later). Nothing is created
// here. InputError naming the key and the path.
void check_output_paths(const TrainerConfig& config);

}  // namespace pipetrain::trainer
