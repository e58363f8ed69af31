// `pipetrain train`, `eval`, `generate`, `logits` and `logprobs`: each runs as one rank of an MPI
// job (under pipetrain launch, mpirun or srun; alone it is a job of one rank).
#include <memory>

#include "commands.h"
#include "pipetrain/comm/rank_main.h"
#include "pipetrain/config/config_section.h"
#include "shape_options.h"
#include "trainer/generation/generate.h"
#include "trainer/generation/logits.h"
#include "trainer/generation/logprobs.h"
#include "trainer/job_config.h"
#include "trainer/trainer.h"

namespace pipetrain::cli {

Command add_train_command(CLI::App& app) {
  struct Options {
    std::string config;
    trainer::TrainerOverrides overrides;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "train", "Train a built-in model from a config (run under pipetrain launch)");
  command->add_option("--config", options->config, "Config file (JSON)")->required();
  auto& o = options->overrides;
  command->add_option("--pipe", o.pipe, "Pipeline stages (pipeline.stages)");
  command->add_option("--data", o.data, "Data-parallel size (checked against the job)");
  command->add_option("--model", o.model, "Tensor-parallel size (model_parallel)");
  command->add_option("--context-parallel", o.context,
                      "Ranks splitting each sequence, attention as a ring (context_parallel)");
  command->add_option("--expert-parallel", o.expert,
                      "Data-parallel ranks splitting each MoE layer's experts (expert_parallel)");
  command->add_flag("--sequence-parallel", o.sequence_parallel,
                    "Split the sequence over the tensor-parallel group outside its linears "
                    "(sequence_parallel)");
  command->add_option("--micro-batches", o.micro_batches,
                      "Micro-batches per step (gradient_accumulation_steps)");
  command->add_option("--zero", o.zero,
                      "ZeRO stage over the data-parallel ranks: 0-3, 3 sharding the parameters "
                      "(zero_optimization.stage)");
  command->add_option("--train-iters", o.train_iters, "Optimizer steps to train for");
  command->add_option("--eval-interval", o.eval_interval, "Steps between validations");
  command->add_option("--seed", o.seed, "Base seed");
  command->add_option("--lr", o.lr, "Learning rate (optimizer.params.lr)");
  command->add_option("--save", o.save, "Checkpoint directory");
  command->add_option("--load", o.load, "Resume from this directory's latest checkpoint");
  command->add_flag(
      "--overwrite", o.overwrite,
      "Save into a folder holding another run's checkpoints, starting over (overwrite)");
  command->add_option("--trace", o.trace, "Write a Chrome/Perfetto trace of one step here");
  command->add_option("--schedule", o.schedule,
                      "Training schedule (pipeline.schedule): " + schedule_names());
  command->add_option("--chunks", o.chunks,
                      "Model chunks per stage (pipeline.chunks): " + chunk_counts());
  command->add_option("--device", o.device, "Where ranks compute: auto, cpu or cuda (device)");
  return {command, [options] {
            return comm::run_rank(0, nullptr, [&] {
              return trainer::train(trainer::apply_overrides(
                  config::read_json_file(options->config), options->overrides));
            });
          }};
}

Command add_eval_command(CLI::App& app) {
  struct Options {
    std::string checkpoint;
    std::optional<int64_t> eval_iters;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command =
      app.add_subcommand("eval", "Validation loss of a checkpoint saved by pipetrain train");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command->add_option("--eval-iters", options->eval_iters,
                      "Validation batches of the training's batch size (default: its eval_iters)");
  return {command, [options] {
            return comm::run_rank(0, nullptr, [&] {
              return trainer::evaluate_checkpoint(options->checkpoint, options->eval_iters);
            });
          }};
}

Command add_generate_command(CLI::App& app) {
  auto options = std::make_shared<trainer::GenerateOptions>();
  CLI::App* command = app.add_subcommand(
      "generate", "Sample text from a language model checkpoint through the pipeline");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command
      ->add_option("--prompt", options->prompts,
                   "Text to continue (repeat for more prompts; default \"The \")")
      ->allow_extra_args(false)
      ->delimiter('\0');
  command->add_option("--prompts", options->prompts_file, "A file of prompts, one per line");
  command->add_option("--tokens", options->tokens, "New tokens per prompt")->capture_default_str();
  command->add_flag("!--no-kv-cache", options->kv_cache,
                    "Run the whole window for every token instead of caching keys and values");
  command->add_flag("!--one-at-a-time", options->in_flight,
                    "Generate the prompts one after another instead of in flight");
  command
      ->add_option("--max-in-flight", options->max_in_flight,
                   "Prompts in flight at once (the others wait their turn)")
      ->capture_default_str();
  command->add_option("--format", options->format, "text, or jsonl: one JSON object per prompt")
      ->capture_default_str();
  command->add_option("--temperature", options->temperature, "Softmax temperature; 0 is greedy")
      ->capture_default_str();
  command->add_option("--top-k", options->top_k, "Sample among the k likeliest tokens; 0: all")
      ->capture_default_str();
  command->add_option("--seed", options->seed, "Sampling seed")->capture_default_str();
  command
      ->add_option("--top-p", options->top_p,
                   "Sample among the fewest likeliest tokens whose probabilities reach p")
      ->capture_default_str();
  command->add_option("--stop", options->stop,
                      "A token id that ends a prompt's generation (kept; repeat for more), "
                      "besides the model's end-of-sequence ids");
  command->add_flag("!--no-stop", options->stop_at_end,
                    "Do not stop at the model's end-of-sequence ids (generation_config.json's "
                    "eos_token_id, else model.eos_token_id); only at --stop ids");
  command->add_option(
      "--tokenizer", options->tokenizer,
      "tokenizer.json or SentencePiece .model for the prompt and the text (default: the one the "
      "model trained with, sample.tokenizer; else bytes)");
  command
      ->add_option("--model", options->tensor_parallel,
                   "Tensor-parallel size (the pipeline gets ranks / model stages)")
      ->capture_default_str();
  return {command, [options] {
            return comm::run_rank(0, nullptr,
                                  [&] { return trainer::generate_from_checkpoint(*options); });
          }};
}

Command add_logits_command(CLI::App& app) {
  auto options = std::make_shared<trainer::LogitsOptions>();
  CLI::App* command = app.add_subcommand(
      "logits",
      "Write what a language model checkpoint predicts at every position of a token "
      "sequence (safetensors \"logits\" [tokens, vocab])");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command->add_option("--tokens", options->tokens, "Token ids, e.g. 5,17,2")
      ->required()
      ->delimiter(',');
  command
      ->add_option("--model", options->tensor_parallel,
                   "Tensor-parallel size (the pipeline gets ranks / model stages)")
      ->capture_default_str();
  command
      ->add_option("--expert-parallel", options->expert_parallel,
                   "Ranks a mixture of experts' experts are split over (as many replicas run "
                   "the tokens; the pipeline gets ranks / (model x expert-parallel) stages)")
      ->capture_default_str();
  command->add_option("--out", options->out, "Output .safetensors file")->required();
  return {command, [options] {
            return comm::run_rank(0, nullptr, [&] { return trainer::write_logits(*options); });
          }};
}

Command add_logprobs_command(CLI::App& app) {
  auto options = std::make_shared<trainer::LogprobsOptions>();
  CLI::App* command = app.add_subcommand(
      "logprobs",
      "Write each token's log-probability under a language model checkpoint, for every "
      "example of prepared data (safetensors: logprobs, mask, offsets, sequence_logprobs)");
  command->add_option("--checkpoint", options->checkpoint, "Checkpoint directory")->required();
  command
      ->add_option("--data", options->data,
                   "Prepared examples: indexed dataset prefixes "
                   "with loss masks (prepare-data --chat)")
      ->required();
  command
      ->add_option("--model", options->tensor_parallel,
                   "Tensor-parallel size (the pipeline gets ranks / model stages)")
      ->capture_default_str();
  command
      ->add_option("--expert-parallel", options->expert_parallel,
                   "Ranks a mixture of experts' experts are split over (as many replicas run "
                   "the examples; the pipeline gets ranks / (model x expert-parallel) stages)")
      ->capture_default_str();
  command->add_option("--micro-batch", options->micro_batch, "Examples per forward pass")
      ->capture_default_str();
  command->add_option("--out", options->out, "Output .safetensors file")->required();
  return {command, [options] {
            return comm::run_rank(0, nullptr, [&] { return trainer::write_logprobs(*options); });
          }};
}

}  // namespace pipetrain::cli
