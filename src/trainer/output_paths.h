#pragma once

#include <string>

#include "trainer/trainer_config.h"

namespace pipetrain::trainer {

// Before any work: every output the trainer will write (save, trace, log.*) must be
// writable where it points: a folder, or a file's folder, must exist as a writable folder
// or be creatable below its nearest existing ancestor, a writable folder. Nothing is
// created here. InputError naming the key and the path.
void check_output_paths(const TrainerConfig& config);

// A folder to write into (`key` names the option, e.g. "--out"): it exists as a writable
// folder, or can be created below its nearest existing ancestor, a writable folder.
// Nothing is created here. InputError naming the key and the path.
void check_output_folder(const std::string& key, const std::string& path);

// After every input check (rank 0): the folders of the trace and log files, where missing.
// InputError naming the key when one cannot be made (a check passed for a place that still
// refuses it, e.g. under /proc).
void make_output_folders(const TrainerConfig& config);

// Makes `path` and the folders above it, where missing; InputError naming `key` and why
// when it cannot.
void make_folder(const std::string& key, const std::string& path);

}  // namespace pipetrain::trainer
