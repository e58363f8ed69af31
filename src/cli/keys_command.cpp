// `pipetrain keys`: every config key `pipetrain train` reads, as the README's table.
#include <cstdio>

#include "commands.h"
#include "pipetrain/trainer/job_config.h"

namespace pipetrain::cli {

Command add_keys_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "keys", "Print every config key (type, default, meaning) as a Markdown table");
  return {command, [] {
            std::fputs(trainer::key_table_markdown().c_str(), stdout);
            return 0;
          }};
}

}  // namespace pipetrain::cli
