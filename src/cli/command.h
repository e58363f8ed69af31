#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <vector>

namespace pipetrain::cli {

// A sub-command: its CLI11 parser and what runs when the user picked it. `run` returns
// the process exit code; it throws InputError for bad arguments it detects itself.
struct Command {
  CLI::App* parser = nullptr;
  std::function<int()> run;
};

using CommandList = std::vector<Command>;

}  // namespace pipetrain::cli
