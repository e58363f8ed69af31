#include "pipetrain/trainer/trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "pipetrain/atomic_file.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/checkpoint/safetensors.h"
#include "pipetrain/data/token_data.h"
#include "pipetrain/errors.h"
#include "pipetrain/tensor_parallel/collectives.h"
#include "pipetrain/tensorboard.h"
#include "pipetrain/trainer/metrics_log.h"
#include "pipetrain/trainer/trace.h"

namespace pipetrain {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// Everything one rank of a job needs, built from an effective config.
struct Job {
  nlohmann::json effective;
  TrainingConfig config;
  TrainerConfig trainer;
  std::shared_ptr<Grid> grid;
  std::shared_ptr<PipelineModule> module;
  std::unique_ptr<PipelineEngine> engine;
  std::unique_ptr<MicroBatchSource> train_data;
  std::unique_ptr<MicroBatchSource> validation_data;
  nlohmann::json validation_start;  // the validation source's state before any draw
};

std::unique_ptr<MicroBatchSource> token_source(const at::Tensor& tokens, const Job& job,
                                               uint64_t stream) {
  return std::make_unique<SequenceSource>(tokens, job.config.model.gpt.context,
                                          job.engine->config().train_micro_batch_size_per_gpu,
                                          static_cast<uint64_t>(job.config.seed), stream);
}

void build_data(Job& job) {
  const auto& data = job.trainer.data;
  const int64_t replica = job.grid->data_parallel_id();
  constexpr uint64_t kValidationStreams = 1 << 20;
  if (data.type == "synthetic") {
    if (job.config.model.type != "mlp")
      throw InputError("data.type \"synthetic\" feeds model.type \"mlp\"");
    const auto& m = job.config.model.mlp;
    const int64_t batch = job.engine->config().train_micro_batch_size_per_gpu;
    const uint64_t seed = static_cast<uint64_t>(job.config.seed);
    job.train_data = std::make_unique<RegressionSource>(m.inputs, m.outputs, batch, seed, replica);
    job.validation_data = std::make_unique<RegressionSource>(m.inputs, m.outputs, batch, seed,
                                                             kValidationStreams + replica);
    return;
  }
  if (job.config.model.type != "gpt")
    throw InputError("data.type \"" + data.type + "\" feeds model.type \"gpt\"");
  const int64_t vocab = job.config.model.gpt.vocab_size;
  TokenCorpus corpus;
  if (data.type == "text") {
    if (vocab < 256)
      throw InputError("model.vocab_size " + std::to_string(vocab) +
                       " is below 256, the byte vocabulary of text data");
    corpus = text_corpus(data.paths, data.validation_fraction);
  } else {
    corpus = token_files(data.paths, static_cast<int>(data.token_bytes), vocab,
                         data.validation_fraction);
  }
  job.train_data = token_source(corpus.train, job, replica);
  job.validation_data = token_source(corpus.validation, job, kValidationStreams + replica);
}

Job build_job(const nlohmann::json& effective) {
  Job job;
  job.effective = effective;
  job.config = parse_training_config(effective, trainer_keys());
  job.trainer = parse_trainer_config(effective);
  auto world = comm::MpiCommunicator::world();
  const int64_t pipe = job.config.pipeline.stages;
  const int64_t model_parallel = job.trainer.model_parallel;
  const std::string times_model =
      model_parallel > 1 ? " x model_parallel " + std::to_string(model_parallel) : "";
  if (world->size() % (pipe * model_parallel) != 0) {
    throw InputError("pipeline.stages " + std::to_string(pipe) + times_model +
                     " does not divide the job's " + std::to_string(world->size()) + " ranks");
  }
  const int64_t data = world->size() / (pipe * model_parallel);
  if (job.trainer.data_parallel && job.trainer.data_parallel != data) {
    throw InputError("data-parallel size " + std::to_string(job.trainer.data_parallel) + " with " +
                     std::to_string(pipe) + " stages" + times_model + " needs " +
                     std::to_string(job.trainer.data_parallel * pipe * model_parallel) +
                     " ranks, the job has " + std::to_string(world->size()));
  }
  // Without tensor parallelism the topology has no model axis, so ranks describe
  // themselves as (pipe, data) only.
  job.grid = std::make_shared<Grid>(
      model_parallel > 1
          ? pipe_model_data_parallel_topology(static_cast<int>(pipe), static_cast<int>(data),
                                              static_cast<int>(model_parallel))
          : pipe_data_parallel_topology(static_cast<int>(pipe), static_cast<int>(data)),
      world);
  const auto model =
      models::make_builtin_model(job.config.model, tensor_parallel::Group{job.grid->model_comm()});
  job.module = std::make_shared<PipelineModule>(
      model.layers, model.loss,
      PipelineModuleOptions{
          .stages = static_cast<int>(pipe),
          .stage_id = job.grid->stage_id(),
          .partition_method = job.config.pipeline.partition_method,
          .seed = static_cast<uint64_t>(job.config.seed),
          .activation_checkpoint_interval =
              static_cast<int>(job.config.pipeline.activation_checkpoint_interval),
          .profile_sample = model.sample_input(2),
          .agree_on_costs = [grid = job.grid](std::vector<double>& costs) {
            at::Tensor shared = at::tensor(costs, at::kDouble);
            grid->world_comm()->broadcast(shared, 0);
            costs.assign(shared.data_ptr<double>(), shared.data_ptr<double>() + shared.numel());
          }});
  job.engine = std::make_unique<PipelineEngine>(job.module, job.grid, job.config);
  job.engine->set_progress_report(false);
  // Dropout draws from the default generator: a stream per stage and replica, fixed by the
  // seed and shared by a tensor-parallel group, whose replicated activations must stay equal.
  const int replica =
      job.grid->stage_id() * job.grid->data_parallel_size() + job.grid->data_parallel_id();
  at::manual_seed(layer_seed(static_cast<uint64_t>(job.config.seed), -1 - replica));
  build_data(job);
  job.validation_start = job.validation_data->state();
  return job;
}

double validation_loss(Job& job) {
  // The same validation batches every time: back to where the source started.
  job.validation_data->restore(job.validation_start);
  double total = 0;
  for (int64_t i = 0; i < job.trainer.eval_iters; ++i)
    total += job.engine->eval_batch(job.validation_data.get()).loss;
  return total / job.trainer.eval_iters;
}

std::string printable(const std::vector<int64_t>& tokens) {
  std::string text;
  for (int64_t t : tokens) {
    const char c = static_cast<char>(t);
    text += (c == '\n' || c == '\t' || (t >= 32 && t < 127)) ? c : '?';
  }
  return text;
}

std::vector<int64_t> bytes_of(const std::string& text) {
  return {text.begin(), text.end()};
}

// Milliseconds this rank spent per instruction kind between two readings of its timers.
nlohmann::json timings_since(const InstructionTimers& before, const InstructionTimers& after) {
  nlohmann::json timings = nlohmann::json::object();
  for (int k = 0; k < schedule::kNumOpKinds; ++k) {
    const auto kind = static_cast<schedule::OpKind>(k);
    const double ms = (after.seconds(kind) - before.seconds(kind)) * 1e3;
    if (ms > 0) timings[std::string(schedule::name(kind))] = ms;
  }
  return timings;
}

// The effective config of a checkpoint, re-sized for a job of `ranks` ranks on one
// pipeline (data-parallel 1) with `micro_batch` samples per micro-batch.
nlohmann::json config_of_checkpoint(const std::string& checkpoint, int ranks, int64_t micro_batch,
                                    int64_t micro_batches) {
  const fs::path folder = fs::path(checkpoint) / resolve_tag(checkpoint, "latest");
  const nlohmann::json manifest =
      nlohmann::json::parse(read_file(folder / "manifest.json"), nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("client_state") ||
      !manifest["client_state"].contains("config")) {
    throw InputError((folder / "manifest.json").string() +
                     " holds no training config (not saved by pipetrain train?)");
  }
  nlohmann::json config = manifest["client_state"]["config"];
  config["pipeline"]["stages"] = ranks;
  config.erase("train_batch_size");
  config.erase("data_parallel");
  config.erase("model_parallel");
  config["train_micro_batch_size_per_gpu"] = micro_batch;
  config["gradient_accumulation_steps"] = micro_batches;
  config["load"] = "";
  config["save"] = "";
  return config;
}

}  // namespace

std::vector<int64_t> sample_tokens(PipelineEngine& engine, std::vector<int64_t> tokens,
                                   int64_t count, double temperature, int64_t top_k, uint64_t seed,
                                   int64_t context) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const Grid& grid = engine.grid();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t length = std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    const at::Tensor window =
        at::tensor(std::vector<int64_t>(tokens.end() - length, tokens.end()), at::kLong)
            .unsqueeze(0);
    const Activation outputs = engine.infer({window});
    at::Tensor next = at::zeros({1}, at::kLong);
    if (grid.is_last_stage()) {
      // The last position's logits, whole again from the tensor-parallel vocabulary slices.
      at::Tensor logits = tensor_parallel::gather_from_group(
                              outputs.at(0)[0][-1], tensor_parallel::Group{grid.model_comm()})
                              .to(at::kDouble);
      if (temperature == 0) {
        next = logits.argmax().reshape({1});
      } else {
        logits = logits / temperature;
        if (top_k > 0 && top_k < logits.numel()) {
          const at::Tensor kth = std::get<0>(logits.topk(top_k)).min();
          logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
        }
        next = at::multinomial(at::softmax(logits, 0), 1, false, generator);
      }
    }
    grid.pipe_comm()->broadcast(next, grid.pipe_parallel_size() - 1);
    tokens.push_back(next.item<int64_t>());
  }
  return tokens;
}

int train(const nlohmann::json& effective_config) {
  Job job = build_job(effective_config);
  PipelineEngine& engine = *job.engine;
  const Grid& grid = *job.grid;
  const TrainerConfig& t = job.trainer;
  const bool leader = grid.global_rank() == 0;
  nlohmann::json effective = job.effective;
  effective["train_batch_size"] = engine.config().train_batch_size;
  effective["train_micro_batch_size_per_gpu"] = engine.config().train_micro_batch_size_per_gpu;
  effective["gradient_accumulation_steps"] = engine.config().gradient_accumulation_steps;

  if (!t.load.empty()) {
    load_checkpoint(engine, t.load, "latest", job.train_data.get());
    if (leader)
      std::printf("resumed from %s at step %lld\n", t.load.c_str(),
                  static_cast<long long>(engine.global_steps()));
  }
  if (leader) {
    std::printf("effective config: %s\n", effective.dump().c_str());
    std::printf("job: %d ranks = pipe %d x data %d x model %d; model %s, %d layers\n",
                grid.world_size(), grid.pipe_parallel_size(), grid.data_parallel_size(),
                grid.model_parallel_size(), job.config.model.type.c_str(),
                job.module->num_layers());
    if (!t.save.empty()) {
      fs::create_directories(t.save);
      write_file_atomically(fs::path(t.save) / "config.json", effective.dump(2) + "\n");
    }
  }
  std::unique_ptr<MetricsLog> metrics;
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (leader) {
    metrics = std::make_unique<MetricsLog>(t.log.metrics, t.log.csv, /*append=*/!t.load.empty());
    if (!t.log.tensorboard.empty())
      tensorboard = std::make_unique<TensorBoardWriter>(t.log.tensorboard);
  }
  ProgressLine progress(t.train_iters, job.config.steps_per_print);
  const nlohmann::json client_state = {{"config", effective}};
  const int64_t samples = engine.config().train_batch_size;
  const int64_t tokens_per_sample =
      job.config.model.type == "gpt" ? job.config.model.gpt.context : 1;

  const bool fp16 = job.config.precision.dtype == "fp16";
  const double first_validation = validation_loss(job);
  if (leader)
    progress.message("validation loss before training: " + std::to_string(first_validation));
  double last_validation = first_validation;
  double seconds_per_step = 0;
  while (engine.global_steps() < t.train_iters) {
    const int64_t trace_step = t.trace_step > 0 ? t.trace_step : t.train_iters;
    const bool trace = !t.trace.empty() && engine.global_steps() + 1 == trace_step;
    if (trace) engine.record_next_batch();
    const InstructionTimers timers_before = engine.timers();
    const auto start = Clock::now();
    const double loss = engine.train_batch(job.train_data.get());
    if (trace) {
      write_trace(t.trace, engine, engine.take_records());
      if (leader)
        progress.message("wrote the trace of step " + std::to_string(trace_step) + " to " +
                         t.trace);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    seconds_per_step = seconds_per_step == 0 ? seconds : 0.9 * seconds_per_step + 0.1 * seconds;
    const int64_t step = engine.global_steps();
    nlohmann::json record = {
        {"step", step},
        {"loss", loss},
        {"lr", engine.last_learning_rate()},
        {"grad_norm", engine.last_grad_norm()},
        {"loss_scale", fp16 ? nlohmann::json(engine.loss_scale()) : nlohmann::json(nullptr)},
        {"skipped_steps", engine.skipped_steps()},
        {"samples_per_s", samples / seconds},
        {"tokens_per_s", samples * tokens_per_sample / seconds},
        {"timings_ms", timings_since(timers_before, engine.timers())}};
    const bool evaluate =
        (t.eval_interval > 0 && step % t.eval_interval == 0) || step == t.train_iters;
    if (evaluate) {
      last_validation = validation_loss(job);
      record["val_loss"] = last_validation;
    }
    if (leader) {
      progress.update(step, loss, engine.last_learning_rate(), samples / seconds_per_step,
                      samples * tokens_per_sample / seconds_per_step, seconds_per_step,
                      fp16 ? " scale " + std::to_string(static_cast<int64_t>(engine.loss_scale())) +
                                 " skipped " + std::to_string(engine.skipped_steps())
                           : std::string());
      if (evaluate)
        progress.message("step " + std::to_string(step) + " validation loss " +
                         std::to_string(last_validation));
      metrics->write(record);
      if (tensorboard) {
        std::map<std::string, double> scalars = {{"train/loss", loss},
                                                 {"train/loss_scale", engine.loss_scale()},
                                                 {"train/lr", engine.last_learning_rate()},
                                                 {"train/grad_norm", engine.last_grad_norm()},
                                                 {"train/samples_per_s", samples / seconds}};
        if (evaluate) scalars["val/loss"] = last_validation;
        tensorboard->add_scalars(step, scalars);
      }
    }
    const bool save = !t.save.empty() && ((t.save_interval > 0 && step % t.save_interval == 0) ||
                                          step == t.train_iters);
    if (save) {
      save_checkpoint(engine, t.save, "step_" + std::to_string(step), client_state,
                      job.train_data.get());
      if (leader) progress.message("saved " + t.save + "/step_" + std::to_string(step));
    }
  }
  if (leader) {
    progress.finish();
    std::printf(
        "validation loss: %.4f before, %.4f after %lld steps (uniform over %lld tokens: %.4f)\n",
        first_validation, last_validation, static_cast<long long>(engine.global_steps()),
        static_cast<long long>(job.config.model.gpt.vocab_size),
        std::log(static_cast<double>(job.config.model.gpt.vocab_size)));
  }
  if (job.config.model.type == "gpt" && t.data.type == "text" && t.sample.tokens > 0) {
    const auto text = sample_tokens(
        engine, bytes_of(t.sample.prompt), t.sample.tokens, t.sample.temperature, t.sample.top_k,
        static_cast<uint64_t>(job.config.seed), job.config.model.gpt.context);
    if (leader) std::printf("sample: %s\n", printable(text).c_str());
  }
  return 0;
}

int evaluate_checkpoint(const std::string& checkpoint, int64_t eval_iters) {
  const int ranks = comm::MpiCommunicator::world()->size();
  nlohmann::json config = config_of_checkpoint(checkpoint, ranks, 8, 1);
  config["eval_iters"] = eval_iters;
  Job job = build_job(config);
  load_checkpoint(*job.engine, checkpoint, "latest");
  const double loss = validation_loss(job);
  if (job.grid->global_rank() == 0) {
    std::printf("validation loss %.4f over %lld batches (step %lld)\n", loss,
                static_cast<long long>(eval_iters),
                static_cast<long long>(job.engine->global_steps()));
  }
  return 0;
}

int generate_from_checkpoint(const GenerateOptions& options) {
  const int ranks = comm::MpiCommunicator::world()->size();
  Job job = build_job(config_of_checkpoint(options.checkpoint, ranks, 1, 1));
  if (job.config.model.type != "gpt") throw InputError("generate needs a GPT checkpoint");
  load_checkpoint(*job.engine, options.checkpoint, "latest");
  const auto tokens =
      sample_tokens(*job.engine, bytes_of(options.prompt), options.tokens, options.temperature,
                    options.top_k, options.seed, job.config.model.gpt.context);
  if (job.grid->global_rank() == 0) std::printf("%s\n", printable(tokens).c_str());
  return 0;
}

}  // namespace pipetrain
