// `pipetrain export`: a checkpoint's model as one safetensors file, or as a transformers
// model folder.
#include <iostream>
#include <memory>

#include "commands.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "trainer/transformers/hugging_face.h"

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
      "Write a checkpoint's weights as one safetensors file (names layers.<i>.<tensor>), as a "
      "Hugging Face transformers model folder (--format hf: config.json, model.safetensors; "
      "LoRA adapters merged into the weights), or a LoRA fine-tune's adapters as a peft folder "
      "(--format peft: adapter_config.json, adapter_model.safetensors)");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command->add_option("--tag", options->tag, "Tag to export")->capture_default_str();
  command->add_option("--format", options->format, "safetensors, hf or peft")
      ->check(CLI::IsMember({"safetensors", "hf", "peft"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "Output .safetensors file (hf, peft: a folder)")
      ->required();
  return {command, [options] {
            if (options->format == "hf") {
              trainer::export_hugging_face(options->checkpoint, options->tag, options->out);
            } else if (options->format == "peft") {
              trainer::export_peft(options->checkpoint, options->tag, options->out);
            } else {
              checkpoint::export_checkpoint(options->checkpoint, options->tag, options->out);
            }
            std::cout << "wrote " << options->out << "\n";
            return 0;
          }};
}

}  // namespace pipetrain::cli
