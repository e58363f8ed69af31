#pragma once

#include "command.h"

namespace pipetrain::cli {

Command add_schedule_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);

}  // namespace pipetrain::cli
