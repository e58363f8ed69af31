// `pipetrain launch`: start an MPI job with flags that work here and in containers.
#include <unistd.h>

#include <iostream>
#include <memory>
#include <thread>

#include "commands.h"
#include "launch/mpirun_command.h"
#include "launch/run_job.h"

namespace pipetrain::cli {

Command add_launch_command(CLI::App& app, std::vector<std::string> program) {
  struct Options {
    launch::LaunchOptions launch;
    bool dry_run = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand("launch",
                                         "Run PROGRAM ARGS... as N MPI ranks: pipetrain launch -n "
                                         "N [--hostfile F] [--] PROGRAM ARGS...");
  command->add_option("-n,--ranks", options->launch.ranks, "Number of ranks")->required();
  command->add_option("--hostfile", options->launch.hostfile, "MPI hostfile for multi-host jobs");
  command->add_flag("--dry-run", options->dry_run,
                    "Print the mpirun command instead of running it");
  command->prefix_command();  // without "--", everything from the program on belongs to it

  return {command, [options, command, program] {
            launch::LaunchOptions launch = options->launch;
            launch.command = command->remaining();
            launch.command.insert(launch.command.end(), program.begin(), program.end());
            launch.local_cores =
                static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
            launch.as_root = ::geteuid() == 0;
            // Ranks see a pseudo-terminal under mpirun; tell them what the user has.
            ::setenv("PIPETRAIN_TERMINAL", ::isatty(STDOUT_FILENO) ? "1" : "0", /*overwrite=*/0);
            if (!options->dry_run) return launch::run_job(launch);
            const auto argv = launch::mpirun_command(launch);
            for (std::size_t i = 0; i < argv.size(); ++i) std::cout << (i ? " " : "") << argv[i];
            std::cout << '\n';
            return 0;
          }};
}

}  // namespace pipetrain::cli
