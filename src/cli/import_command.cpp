// `pipetrain import`: a Hugging Face transformers model folder as a pipetrain checkpoint.
#include <memory>

#include "commands.h"
#include "pipetrain/comm/rank_main.h"
#include "trainer/transformers/hugging_face.h"

namespace pipetrain::cli {

Command add_import_command(CLI::App& app) {
  struct Options {
    std::string hf;
    std::string out;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "import",
      "Turn a Hugging Face transformers model folder (GPT2LMHeadModel, LlamaForCausalLM, "
      "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
      "Qwen3MoeForCausalLM or Gemma3ForCausalLM: config.json and model.safetensors or its "
      "shards, with its tokenizer and generation files) into a pipetrain checkpoint");
  command->add_option("--hf", options->hf, "transformers model folder")->required();
  command->add_option("--out", options->out, "Checkpoint directory to create")->required();
  return {command, [options] {
            return comm::run_rank(0, nullptr, [&] {
              return trainer::import_hugging_face(options->hf, options->out);
            });
          }};
}

}  // namespace pipetrain::cli
