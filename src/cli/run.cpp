// The `pipetrain` command line: one sub-command per task (cli::run), for the pipetrain
// binary and for programs that register models of their own.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "commands.h"
#include "pipetrain/cli/run.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/version.h"

namespace {

constexpr int kExitInputError = 2;

// A command line every rank of a job was given alike: only the first rank (or a process
// outside MPI) reports what is wrong with it, so the job says it once.
bool first_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* rank = std::getenv(name)) return std::string_view(rank) == "0";
  }
  return true;
}

std::ostream& report() {
  static std::ostream silent(nullptr);
  return first_rank() ? std::cerr : silent;
}

// The exit of a bad command line: other ranks wait a moment, so that mpirun, which ends the
// job when a rank exits non-zero, does not end the first one before it has said why.
int input_error() {
  if (!first_rank()) std::this_thread::sleep_for(std::chrono::seconds(1));
  return kExitInputError;
}

}  // namespace

namespace pipetrain::cli {

int run(int argc, char** argv) {
  CLI::App app{"pipetrain: pipeline-, data- and tensor-parallel training on LibTorch", "pipetrain"};
  app.set_version_flag("--version", std::string("pipetrain ") + pipetrain::kVersion);
  app.require_subcommand(1);
  // For the docs check: parse the command line as given and stop before any work.
  bool parse_only = false;
  app.add_flag("--parse-only", parse_only,
               "Check the command line only: exit 0 if it parses, 2 with the reason if not");
  // Arguments after "--" belong to the program `launch` starts, not to pipetrain.
  const auto dashes = std::find(argv, argv + argc, std::string_view("--"));
  const std::vector<std::string> program(dashes == argv + argc ? dashes : dashes + 1, argv + argc);
  argc = static_cast<int>(dashes - argv);

  // `launch` first: it alone takes the arguments after "--".
  const pipetrain::cli::CommandList commands = {
      pipetrain::cli::add_launch_command(app, program),
      pipetrain::cli::add_train_command(app),
      pipetrain::cli::add_eval_command(app),
      pipetrain::cli::add_generate_command(app),
      pipetrain::cli::add_logits_command(app),
      pipetrain::cli::add_logprobs_command(app),
      pipetrain::cli::add_export_command(app),
      pipetrain::cli::add_import_command(app),
      pipetrain::cli::add_partition_command(app),
      pipetrain::cli::add_plan_command(app),
      pipetrain::cli::add_calibrate_command(app),
      pipetrain::cli::add_schedule_command(app),
      pipetrain::cli::add_simulate_command(app),
      pipetrain::cli::add_tokenize_command(app),
      pipetrain::cli::add_keys_command(app),
      pipetrain::cli::add_devices_command(app),
  };  // clang-format: one per line

  // CLI11 would only say that a sub-command is required; name the one that is not.
  const auto known = [&](std::string_view name) {
    return std::any_of(commands.begin(), commands.end(),
                       [&](const auto& command) { return command.parser->get_name() == name; });
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    report() << "pipetrain: unknown command '" << argv[1] << "' (see pipetrain --help)\n";
    return input_error();
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    report() << "pipetrain: " << e.what() << " (see pipetrain --help)\n";
    return input_error();
  }

  if (!program.empty() && !commands.front().parser->parsed()) {
    report() << "pipetrain: arguments after -- are only for 'launch'\n";
    return input_error();
  }
  if (parse_only) return 0;
  try {
    for (const auto& command : commands) {
      if (command.parser->parsed()) return command.run();
    }
  } catch (const pipetrain::io::InputError& e) {
    std::cerr << "pipetrain: " << e.what() << "\n";
    return input_error();
  } catch (const std::exception& e) {
    std::cerr << "pipetrain: error: " << pipetrain::io::error_message(e) << "\n";
    return 1;
  }
  return 0;
}

}  // namespace pipetrain::cli
