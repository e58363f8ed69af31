#include "trainer/trainer_config.h"

#include <csignal>
#include <filesystem>

#include "pipetrain/io/errors.h"

namespace pipetrain::trainer {
namespace {

const config::Names<int>& stop_signals() {
  static const config::Names<int> names{{"SIGTERM", SIGTERM}, {"SIGUSR1", SIGUSR1}, {"none", 0}};
  return names;
}

}  // namespace

const config::Names<DataKind>& data_kinds() {
  static const config::Names<DataKind> names{{"text", DataKind::kText},
                                             {"tokens", DataKind::kTokens},
                                             {"indexed", DataKind::kIndexed},
                                             {"synthetic", DataKind::kSynthetic}};
  return names;
}

const config::KeyTable<TrainerConfig>& trainer_keys() {
  static const config::KeyTable<TrainerConfig> table = [] {
    config::KeyTable<TrainerConfig> t;
    t.integer("train_iters", PIPETRAIN_FIELD(train_iters), "steps to train", config::at_least(1))
        .integer("eval_interval", PIPETRAIN_FIELD(eval_interval),
                 "validate every N steps; 0: at the end only", config::at_least(0))
        .integer("eval_iters", PIPETRAIN_FIELD(eval_iters), "batches per validation",
                 config::at_least(1))
        .integer("save_interval", PIPETRAIN_FIELD(save_interval),
                 "checkpoint every N steps; 0: at the end only", config::at_least(0))
        .text("save", PIPETRAIN_FIELD(save), "checkpoint folder; empty: no checkpoints")
        .text("load", PIPETRAIN_FIELD(load), "resume from this folder's latest checkpoint")
        .flag("overwrite", PIPETRAIN_FIELD(overwrite),
              "start over in a `save` folder that holds checkpoints (`--overwrite`); off: the "
              "same command again resumes from its newest checkpoint")
        .flag("checkpoint.async", PIPETRAIN_FIELD(async_save),
              "write checkpoints while training goes on: at the step boundary each rank copies "
              "its state to host memory, a thread writes the files during the next steps, and "
              "`latest` moves once every rank's are complete (one save in flight; a signal or "
              "the end of training waits for it)")
        .choice("save_on_signal", PIPETRAIN_FIELD(save_on_signal), stop_signals(),
                "with `save`: this signal (as a scheduler sends before preempting a job, e.g. "
                "SLURM's `--signal=USR1@120`) finishes the step, saves a checkpoint and ends "
                "the job with exit status 75; `none`: it stops the job at once")
        .choice("data.type", PIPETRAIN_FIELD(data.type), data_kinds(),
                "bytes of text files, token files, Megatron's indexed datasets (`paths`: "
                "prefixes of `.bin`/`.idx` pairs, mapped; windows cross document boundaries as "
                "in Megatron's GPT dataset), or synthetic regression data (MLP)")
        .texts("data.paths", PIPETRAIN_FIELD(data.paths), "files or folders")
        .integer("data.token_bytes", PIPETRAIN_FIELD(data.token_bytes),
                 "2 (uint16) or 4 (uint32) for `tokens`")
        .number("data.validation_fraction", PIPETRAIN_FIELD(data.validation_fraction),
                "held-out share of the tokens")
        .flag("data.pack", PIPETRAIN_FIELD(data.pack),
              "packed documents: a window's documents (ended by `data.document_end`, or an "
              "indexed dataset's by its document index) attend "
              "only within themselves, positions restarting at each (GPT and LLaMA, any "
              "parallelism); off: windows run across documents as one sequence")
        .integer("data.document_end", PIPETRAIN_FIELD(data.document_end),
                 "with `data.pack`, the token id that ends a document (Megatron's EOD); -1: "
                 "an indexed dataset's document index, else `model.eos_token_id`",
                 config::at_least(-1))
        .text("log.metrics", PIPETRAIN_FIELD(log.metrics), "JSON lines, one per step")
        .text("log.csv", PIPETRAIN_FIELD(log.csv), "the same as CSV")
        .text("log.tensorboard", PIPETRAIN_FIELD(log.tensorboard), "TensorBoard event folder")
        .number("log.peak_tflops", PIPETRAIN_FIELD(log.peak_tflops),
                "each rank's dense peak in TFLOP/s in the compute type, for the model FLOP "
                "utilisation (MFU) in the progress line and metrics; 0: an H100's, H200's or "
                "A100's as the planner's `clusters/` give them, none on a CPU (give "
                "`pipetrain calibrate`'s fp32 figure)",
                config::at_least(0))
        .text("sample.prompt", PIPETRAIN_FIELD(sample.prompt),
              "the sample printed at the end (a language model on text, or with "
              "`sample.tokenizer`)")
        .integer("sample.tokens", PIPETRAIN_FIELD(sample.tokens), "0: no sample",
                 config::at_least(0))
        .number("sample.temperature", PIPETRAIN_FIELD(sample.temperature), "0: greedy",
                config::at_least(0))
        .integer("sample.top_k", PIPETRAIN_FIELD(sample.top_k), "0: all tokens",
                 config::at_least(0))
        .custom(
            "sample.tokenizer", "string",
            "a Hugging Face `tokenizer.json` (BPE) or a SentencePiece `.model` that encodes the "
            "prompt and decodes the sample (and "
            "`generate`'s, read from the checkpoint); empty: bytes. Kept as an absolute path, "
            "so a checkpoint names it from anywhere",
            [](const std::string& key, const nlohmann::json& value, TrainerConfig& c) {
              const std::string path = config::read_string(key, value);
              c.sample.tokenizer =
                  path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
            },
            [](const TrainerConfig& c) { return nlohmann::json(c.sample.tokenizer); })
        .flag("memory_breakdown", PIPETRAIN_FIELD(memory_breakdown),
              "DeepSpeed's name: report each rank's tensor memory (now and peak) in the "
              "progress line and `log.metrics`; CPU ranks count it with a counting allocator "
              "(GPU ranks always report the caching allocator's)")
        .text("trace", PIPETRAIN_FIELD(trace), "write a Chrome/Perfetto trace of one step here")
        .integer("trace_step", PIPETRAIN_FIELD(trace_step), "the traced step; 0: the last",
                 config::at_least(0))
        .check([](const TrainerConfig& c) {
          if (c.sample.tokens > 0 && c.sample.prompt.empty())
            throw io::InputError(
                "sample.prompt is empty: sampling needs at least one byte to start");
          if (!c.sample.tokenizer.empty() && c.data.type == DataKind::kText)
            throw io::InputError(
                "sample.tokenizer goes with token data (data.type tokens or indexed); text data "
                "is bytes");
        });
    return t;
  }();
  return table;
}

TrainerConfig parse_trainer_config(const nlohmann::json& json) {
  TrainerConfig config;
  trainer_keys().read(json, config);
  return config;
}

}  // namespace pipetrain::trainer
