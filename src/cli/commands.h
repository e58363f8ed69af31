#pragma once

#include <string>
#include <vector>

#include "command.h"

namespace pipetrain::cli {

// `program`: the arguments after "--", if any.
Command add_launch_command(CLI::App& app, std::vector<std::string> program);
Command add_calibrate_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_export_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_import_command(CLI::App& app);
Command add_keys_command(CLI::App& app);
Command add_logits_command(CLI::App& app);
Command add_logprobs_command(CLI::App& app);
Command add_partition_command(CLI::App& app);
Command add_plan_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_train_command(CLI::App& app);

}  // namespace pipetrain::cli
