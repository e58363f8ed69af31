// `pipetrain export`: a checkpoint's model as one safetensors file, or as a transformers
// model folder.
#include <iostream>
#include <memory>

#include "commands.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/trainer/transformers/hugging_face.h"

namespace pipetrain::cli {

Command add_export_command(CLI::App& app) {
  struct Options {
    std::string checkpoint;
    std::string tag = "latest";
    std::string format = "safetensors";
    std::string out;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "export",
      "Write a checkpoint's weights as one safetensors file (names layers.<i>.<tensor>) or as a "
      "Hugging Face transformers model folder (--format hf: config.json, model.safetensors)");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command->add_option("--tag", options->tag, "Tag to export")->capture_default_str();
  command->add_option("--format", options->format, "safetensors or hf")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "Output .safetensors file (hf: a folder)")->required();
  return {command, [options] {
            if (options->format == "hf") {
              trainer::export_hugging_face(options->checkpoint, options->tag, options->out);
            } else {
              checkpoint::export_checkpoint(options->checkpoint, options->tag, options->out);
            }
            std::cout << "wrote " << options->out << "\n";
            return 0;
          }};
}

}  // namespace pipetrain::cli
