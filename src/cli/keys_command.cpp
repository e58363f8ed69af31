// `pipetrain keys`: every config key `pipetrain train` reads (or a cluster file's), as the
// tables in docs/user/config.md and docs/user/planner.md.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "planner/cluster.h"
#include "trainer/job_config.h"

namespace pipetrain::cli {

Command add_keys_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "keys", "Print every config key (type, default, meaning) as a Markdown table");
  auto cluster = std::make_shared<bool>(false);
  command->add_flag("--cluster", *cluster, "The keys of a cluster file (pipetrain plan) instead");
  return {command, [cluster] {
            const std::string table = *cluster
                                          ? config::markdown_table(planner::cluster_keys().docs())
                                          : trainer::key_table_markdown();
            std::fputs(table.c_str(), stdout);
            return 0;
          }};
}

}  // namespace pipetrain::cli
