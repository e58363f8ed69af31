// `pipetrain export`: a checkpoint's model as one safetensors file.
#include <iostream>
#include <memory>

#include "commands.h"
#include "pipetrain/checkpoint/checkpoint.h"

namespace pipetrain::cli {

Command add_export_command(CLI::App& app) {
  struct Options {
    std::string checkpoint;
    std::string tag = "latest";
    std::string out;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "export", "Write a checkpoint's weights as one safetensors file (names layers.<i>.<tensor>)");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command->add_option("--tag", options->tag, "Tag to export")->capture_default_str();
  command->add_option("--out", options->out, "Output .safetensors file")->required();
  return {command, [options] {
            checkpoint::export_checkpoint(options->checkpoint, options->tag, options->out);
            std::cout << "wrote " << options->out << "\n";
            return 0;
          }};
}

}  // namespace pipetrain::cli
