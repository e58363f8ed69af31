#include "trainer/job.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <vector>

#include "data/examples.h"
#include "data/token_data.h"
#include "device/cpu_memory.h"
#include "device/cuda.h"
#include "io/activity.h"
#include "module/layer_seed.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/data/data_source.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/models/model_config.h"
#include "pipetrain/module/lora_config.h"
#include "trainer/faults/faults.h"
#include "trainer/model_flops.h"
#include "trainer/objectives/preference_data.h"
#include "trainer/objectives/reference.h"
#include "trainer/objectives/rollout_data.h"
#include "trainer/output_paths.h"

namespace pipetrain::trainer {
namespace {

// Samples of random input that `profile` partitioning times each layer on.
constexpr int64_t kProfileBatch = 2;
// Training draws its samples from one stream and validation from another, each one global
// sequence of samples shared out over the replicas (data::SamplePosition).
// The byte vocabulary of text data.
constexpr int64_t kByteVocabulary = 256;

std::shared_ptr<topology::Grid> build_grid(const JobConfig& config,
                                           std::shared_ptr<comm::MpiCommunicator> ranks) {
  if (!ranks) ranks = comm::MpiCommunicator::world();
  return std::make_shared<topology::Grid>(topology::resolve_layout(config.layout, ranks->size()),
                                          ranks);
}

std::shared_ptr<module::PipelineModule> build_module(const Job& job) {
  const engine::TrainingConfig& engine = job.config.engine;
  const topology::ParallelLayout& layout = job.config.layout;
  const std::size_t recompute = engine.pipeline.recompute.size();
  if (recompute > 1 && static_cast<int64_t>(recompute) != layout.pipe) {
    throw io::InputError("pipeline.recompute lists " + std::to_string(recompute) +
                         " stages' parts, the pipeline has " + std::to_string(layout.pipe) +
                         " stages (give one list for all, or one per stage)");
  }
  return std::make_shared<module::PipelineModule>(
      job.model.layers, job.model.loss,
      module::PipelineModuleOptions{
          .stages = static_cast<int>(layout.pipe),
          .stage_id = job.grid->stage_id(),
          .chunks = static_cast<int>(layout.chunks),
          .placement = engine.pipeline.schedule.placement(),
          .partition_method = engine.pipeline.partition_method,
          .seed = static_cast<uint64_t>(engine.seed),
          .activation_checkpoint_interval =
              static_cast<int>(engine.pipeline.activation_checkpoint_interval),
          .recompute = engine.pipeline.recompute_of(job.grid->stage_id()),
          .profile_sample = job.model.sample_input(kProfileBatch),
          .agree_on_costs =
              [grid = job.grid](std::vector<double>& costs) {
                at::Tensor shared = at::tensor(costs, at::kDouble);
                grid->world_comm()->broadcast(shared, 0);
                costs.assign(shared.data_ptr<double>(), shared.data_ptr<double>() + shared.numel());
              },
          .token_loss = job.model.token_loss,
          .lora = job.config.lora});
}

// Dropout cannot split over context parallelism: refused before anything is built (the
// blocks lora.layers names are checked with the adapters, check_adapted).
void check_lora(const Job& job) {
  const module::LoraConfig& lora = job.config.lora;
  if (lora.enabled() && lora.dropout > 0 && job.config.layout.context > 1) {
    throw io::InputError(
        "lora.dropout: under context_parallel each rank's slice of a sequence would draw the "
        "same mask; set it to 0");
  }
  int64_t blocks = 0;
  for (const auto& spec : job.model.layers) blocks += spec.block >= 0 ? 1 : 0;
  module::check_adapted(lora, models::type_name(job.config.model), /*adapted=*/1, blocks);
}

// Collective: LoRA's adapters counted over the job, refused when none was made; the job
// line that says what trains.
std::string lora_summary(const Job& job) {
  const module::LoraConfig& lora = job.config.lora;
  if (!lora.enabled()) return {};
  const topology::Grid& grid = *job.grid;
  const module::PipelineModule& module = *job.module;
  const auto layouts = module.shard_layouts();
  // A tied module (named after its key's first layer) counts on its first owner stage.
  std::vector<std::string> counted_elsewhere;
  for (const auto& key : module.tie_keys()) {
    if (module.tie_owner_stages(key).front() == grid.stage_id()) continue;
    for (int i = 0; i < module.num_layers(); ++i) {
      if (module.specs()[i].tie_key != key) continue;
      counted_elsewhere.push_back(std::to_string(i) + ".");
      break;
    }
  }
  // Each tensor once over the job: on the first replica, a split one on every rank of
  // its model group, a whole one on the first.
  auto count = [&](const std::vector<std::pair<std::string, at::Tensor>>& named) {
    double elements = 0;
    for (const auto& [name, tensor] : named) {
      if (std::any_of(counted_elsewhere.begin(), counted_elsewhere.end(),
                      [&](const std::string& prefix) { return name.rfind(prefix, 0) == 0; }))
        continue;
      const bool split = layouts.count(name) > 0;
      if (grid.replica_id() == 0 && (split || grid.tensor_parallel_id() == 0))
        elements += static_cast<double>(tensor.numel());
    }
    return elements;
  };
  const double adapted =
      grid.replica_id() == 0 && grid.tensor_parallel_id() == 0 ? module.adapted_linears() : 0;
  at::Tensor totals = at::tensor(
      {adapted, count(job.module->named_parameters()), count(job.module->named_frozen())},
      at::kDouble);
  grid.world_comm()->all_reduce(totals, comm::ReduceOp::kSum);
  const double linears = totals[0].item<double>(), trained = totals[1].item<double>(),
               frozen = totals[2].item<double>();
  module::check_adapted(lora, models::type_name(job.config.model), linears,
                        std::numeric_limits<int64_t>::max());
  std::string targets;
  for (const auto& name : lora.target_modules) targets += (targets.empty() ? "" : ", ") + name;
  char line[256];
  std::snprintf(line, sizeof line,
                "lora: rank %lld, alpha %g on %s: %.0f linears; %.3g M of %.3g M parameters "
                "trained, the rest frozen",
                static_cast<long long>(lora.rank), lora.alpha, targets.c_str(), linears,
                trained / 1e6, (trained + frozen) / 1e6);
  return line;
}

// Feature vectors for a model that reads them: synthetic regression data.
void build_feature_data(Job& job, const models::FeatureInput& features, int64_t replica) {
  const int64_t batch = job.config.engine.train_micro_batch_size_per_gpu;
  const auto seed = static_cast<uint64_t>(job.config.engine.seed);
  const data::SampleShare share{replica, job.grid->data_parallel_size()};
  job.train_data = std::make_unique<data::RegressionSource>(
      features.inputs, features.outputs, batch, seed, data::kTrainingStream, share);
  job.validation_data = std::make_unique<data::RegressionSource>(
      features.inputs, features.outputs, batch, seed, data::kValidationStream, share);
}

// With data.pack: how documents are told apart. An indexed dataset's own document index,
// unless data.document_end names the id that ends a document; other data by that id, else
// the model's eos_token_id (checked against the vocabulary).
data::DocumentSplit packed_documents(const Job& job, const models::TokenInput& tokens) {
  const auto& data = job.config.trainer.data;
  if (!data.pack) return {};
  if (data.type == DataKind::kIndexed && data.document_end < 0) return {.by_index = true};
  const int64_t end = data.document_end >= 0 ? data.document_end : job.config.model.eos_token_id;
  if (end < 0) {
    throw io::InputError(
        "data.pack needs the id that ends a document: set data.document_end (or train a model "
        "whose config names eos_token_id); an indexed dataset's own document index needs "
        "none");
  }
  if (end >= tokens.vocab_size) {
    throw io::InputError("data.document_end " + std::to_string(end) +
                         " is not below model.vocab_size " + std::to_string(tokens.vocab_size));
  }
  return {.end_id = end};
}

// Fine-tuning examples with loss masks (indexed datasets with PREFIX.mask): whole examples
// per row, the loss per token over the global batch.
void build_example_data(Job& job, const models::TokenInput& tokens, int64_t replica) {
  const auto& data = job.config.trainer.data;
  if (data.document_end >= 0) {
    throw io::InputError(
        "data.document_end: examples with loss masks are told apart by their own index");
  }
  if (!job.model.token_loss) {
    throw io::InputError(
        "data.paths hold examples with loss masks, which need a loss per "
        "token: this model has none (a language model's has)");
  }
  auto corpus = std::make_shared<const data::ExampleCorpus>(data::example_corpus(
      data.paths, tokens.vocab_size, tokens.context, data.pack, data.validation_fraction));
  const data::SampleShare share{replica, job.grid->data_parallel_size()};
  auto source = [&](bool validation, uint64_t stream) {
    return std::make_unique<data::ExampleSource>(
        corpus, validation, tokens.vocab_size, tokens.context,
        job.config.engine.train_micro_batch_size_per_gpu,
        static_cast<uint64_t>(job.config.engine.seed), stream, share, data.pack);
  };
  job.train_data = source(false, data::kTrainingStream);
  job.validation_data = source(true, data::kValidationStream);
  job.config.engine.per_token_loss = true;
  const double trained = 100.0 * static_cast<double>(corpus->trained_count) /
                         static_cast<double>(std::max<int64_t>(corpus->token_count, 1));
  char line[320];
  std::snprintf(line, sizeof line,
                "data: %lld examples with loss masks, %zu rows for training and %zu for "
                "validation (%s); %lld examples cut to %lld tokens; the loss counts %.1f%% of "
                "%lld tokens, per token over each global batch",
                static_cast<long long>(corpus->examples), corpus->train.size(),
                corpus->validation.size(), data.pack ? "packed" : "one example each",
                static_cast<long long>(corpus->truncated),
                static_cast<long long>(tokens.context + 1), trained,
                static_cast<long long>(corpus->token_count));
  job.data_summary = line;
}

// Token sequences for a language model: bytes of text files, token files, or Megatron's
// indexed datasets (fine-tuning examples where they have loss masks).
void build_token_data(Job& job, const models::TokenInput& tokens, int64_t replica) {
  const auto& data = job.config.trainer.data;
  if (job.config.objective.preference()) return build_preference_data(job, tokens, replica);
  if (job.config.objective.policy_gradient()) return build_rollout_data(job, tokens, replica);
  if (data.type == DataKind::kIndexed && data::has_loss_masks(data.paths))
    return build_example_data(job, tokens, replica);
  const data::DocumentSplit documents = packed_documents(job, tokens);
  data::TokenCorpus corpus;
  if (data.type == DataKind::kText) {
    if (tokens.vocab_size < kByteVocabulary)
      throw io::InputError("model.vocab_size " + std::to_string(tokens.vocab_size) +
                           " is below 256, the byte vocabulary of text data");
    corpus = data::text_corpus(data.paths, data.validation_fraction);
  } else if (data.type == DataKind::kIndexed) {
    corpus = data::indexed_corpus(data.paths, tokens.vocab_size, data.validation_fraction,
                                  /*record_documents=*/documents.by_index);
  } else {
    corpus = data::token_files(data.paths, static_cast<int>(data.token_bytes), tokens.vocab_size,
                               data.validation_fraction);
  }
  const data::SampleShare share{replica, job.grid->data_parallel_size()};
  auto source = [&](const data::TokenSpan& part, uint64_t stream) {
    return std::make_unique<data::SequenceSource>(
        part, tokens.vocab_size, tokens.context, job.config.engine.train_micro_batch_size_per_gpu,
        static_cast<uint64_t>(job.config.engine.seed), stream, share, documents);
  };
  job.train_data = source(corpus.train, data::kTrainingStream);
  job.validation_data = source(corpus.validation, data::kValidationStream);
}

void build_data(Job& job) {
  const DataKind type = job.config.trainer.data.type;
  const int64_t replica = job.grid->data_parallel_id();
  const bool synthetic = type == DataKind::kSynthetic;
  if (synthetic != (job.model.features() != nullptr)) {
    throw io::InputError("data.type \"" + config::name_of(data_kinds(), type) +
                         "\" feeds model.type " + models::builtin_types_reading(!synthetic));
  }
  if (synthetic && job.config.trainer.data.pack)
    throw io::InputError("data.pack packs documents of tokens: synthetic data has none");
  if (synthetic) {
    build_feature_data(job, *job.model.features(), replica);
  } else {
    build_token_data(job, *job.model.tokens(), replica);
  }
  // Rollouts from a program (the Python door) come with no source of their own.
  if (job.validation_data) job.validation_start = job.validation_data->state();
}

// Dropout draws from the default generator: a stream per stage and replica, fixed by the
// seed and shared by a tensor-parallel group, whose replicated activations must stay equal,
// and by a context-parallel group, whose ranks draw the whole sequence's masks and keep
// their own positions' (the LLaMA has no dropout).
// Negative indices are never layers', so these streams differ from every layer's seed.
void seed_dropout(const Job& job) {
  const int replica =
      job.grid->stage_id() * job.grid->data_parallel_size() + job.grid->data_parallel_id();
  at::manual_seed(module::layer_seed(static_cast<uint64_t>(job.config.engine.seed), -1 - replica));
}

// A model built from a checkpoint's own config must match what its files hold, layer by
// layer, before anything is allocated.
void check_against_checkpoint(const std::vector<module::LayerSpec>& layers,
                              const std::string& checkpoint) {
  const std::vector<int64_t> saved = checkpoint::saved_parameter_counts(checkpoint);
  if (saved.size() != layers.size()) {
    throw io::InputError(checkpoint + ": its model config gives " + std::to_string(layers.size()) +
                         " layers, its manifest lists " + std::to_string(saved.size()));
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (saved[i] < 0 || !layers[i].count_parameters) continue;  // a tied layer's later use
    const int64_t expected = layers[i].count_parameters();
    if (expected != saved[i]) {
      throw io::InputError(checkpoint + ": layer " + std::to_string(i) + " (" + layers[i].type +
                           "): its model config gives " + std::to_string(expected) +
                           " parameters, its files hold " + std::to_string(saved[i]));
    }
  }
}

// The tokenizer a checkpoint's config names: the file named, or, when that is gone (the
// folders moved), the one of that name beside the checkpoint (import --hf copies it there).
std::string tokenizer_of(const nlohmann::json& saved, const std::string& checkpoint) {
  const nlohmann::json::json_pointer pointer("/sample/tokenizer");
  if (!saved.contains(pointer) || !saved[pointer].is_string()) return {};
  const std::filesystem::path named = saved[pointer].get<std::string>();
  const std::filesystem::path beside = std::filesystem::path(checkpoint) / named.filename();
  std::error_code error;
  if (!named.empty() && !std::filesystem::exists(named, error) &&
      std::filesystem::is_regular_file(beside, error))
    return beside.string();
  return named.string();
}

}  // namespace

nlohmann::json saved_config(const std::string& checkpoint) {
  const nlohmann::json client_state = checkpoint::read_client_state(checkpoint);
  if (!client_state.is_object() || !client_state.contains("config")) {
    throw io::InputError(checkpoint +
                         ": the checkpoint holds no training config (not saved by "
                         "pipetrain train?)");
  }
  nlohmann::json config = client_state["config"];
  // Keys earlier versions wrote into every effective config and this one refuses.
  for (const char* removed : {"reduce_bucket_size", "pipeline.receive_ahead"})
    job_keys().erase(config, removed);
  // The training schedule is the training run's: what reads a checkpoint's config (eval,
  // generate, logits) runs forward only, and a schedule file may be gone by now.
  for (const char* schedule :
       {"pipeline.schedule", "pipeline.chunks", "pipeline.schedule_file", "pipeline.max_live"})
    job_keys().erase(config, schedule);
  return config;
}

Job build_job(const nlohmann::json& file, const std::string& trusted_from, DataUse data,
              std::shared_ptr<comm::MpiCommunicator> ranks) {
  Job job;
  std::vector<std::string> unknown;
  job.config = parse_job_config(file, &unknown);
  refuse_unknown_keys(unknown);
  check_output_paths(job.config.trainer);
  if (job.config.trainer.memory_breakdown) device::count_cpu_memory();  // before any tensor
  job.grid = build_grid(job.config, std::move(ranks));
  job.comms = std::make_shared<groups::Communicators>(
      job.grid, job.config.engine.device, comm::Seconds(job.config.engine.comm_timeout));
  tensor_parallel::Group model_group = job.comms->tensor_group();
  model_group.sequence_parallel = job.config.layout.sequence_parallel;
  const expert_parallel::Group experts = job.comms->experts_group();
  job.model = models::make_builtin_model(job.config.model, model_group, job.comms->context_group(),
                                         experts);
  if (!trusted_from.empty()) check_against_checkpoint(job.model.layers, trusted_from);
  engine::resolve_batch(job.config.engine, job.grid->data_parallel_size());
  ObjectiveConfig& objective = job.config.objective;
  if (objective.preference() && objective.reference != ReferenceKind::kPrecomputed &&
      data == DataUse::kRead)
    objective.reference_checkpoint = reference_checkpoint(job.config);  // written as resolved
  if (data == DataUse::kRead) {
    // Before the model is allocated: data too short for one sequence is refused at once.
    // The data draws from generators of its own, so the order changes no number.
    const io::Activity reading("reading the training data");
    build_data(job);
  }
  check_lora(job);
  {
    const io::Activity building("building the model's layers");
    job.module = build_module(job);
  }
  job.lora_summary = lora_summary(job);
  job.effective = job_keys().write(job.config);
  {
    const io::Activity preparing("setting up the engine (fp32 masters, pipe buffers)");
    engine::TrainingConfig engine_config = job.config.engine;
    // Under sequence parallelism each rank of the model group sends its own slice: there is
    // no common tensor to share out (the saved config keeps the user's setting).
    if (model_group.sequence_parallel) engine_config.pipeline.partitioned_transfers = false;
    job.engine = std::make_unique<engine::PipelineEngine>(job.module, job.comms, engine_config);
  }
  inject_faults_from_environment(*job.engine);
  job.engine->set_progress_report(false);
  // The global gradient norm, for the progress line and the metrics, every step.
  job.engine->set_grad_norm_reporting(true);
  seed_dropout(job);
  return job;
}

double peak_flops(const Job& job) {
  if (job.config.trainer.log.peak_tflops > 0) return job.config.trainer.log.peak_tflops * 1e12;
  const at::Device device = job.engine->device();
  if (!device.is_cuda()) return 0;
  const bool half = job.config.engine.precision.dtype != optim::Precision::kFp32;
  return known_peak_flops(device::gpu_name(device.index()), half);
}

double validation_loss(Job& job) {
  const io::Activity evaluating("computing the validation loss");
  // The same validation batches every time: back to where the source started.
  job.validation_data->restore(job.validation_start);
  // Per-token loss: each batch's mean weighed by its tokens, the mean over them all.
  double total = 0, weights = 0;
  for (int64_t i = 0; i < job.config.trainer.eval_iters; ++i) {
    const engine::PipelineEngine::EvalResult batch =
        job.engine->eval_batch(job.validation_data.get());
    const double weight = job.config.engine.per_token_loss ? batch.tokens : 1.0;
    total += batch.loss * weight;
    weights += weight;
  }
  return weights > 0 ? total / weights : 0.0;
}

namespace {

// A LoRA fine-tune resumes with the alpha it trained with: the scale alpha / rank is in no
// tensor's shape, so the load could not tell (rank and targets it tells by the adapters).
void check_lora_alpha(const nlohmann::json& config, const nlohmann::json& saved,
                      const std::string& load) {
  module::LoraConfig mine, theirs;
  module::lora_keys().read(config, mine);  // the other sections' keys are not its to judge
  module::lora_keys().read(saved, theirs);
  if (mine.enabled() && theirs.enabled() && mine.alpha != theirs.alpha) {
    throw io::InputError("lora.alpha " + nlohmann::json(mine.alpha).dump() +
                         " contradicts the checkpoint in " + load + " (" +
                         nlohmann::json(theirs.alpha).dump() +
                         "): its adapters were trained at that scale");
  }
}

}  // namespace

nlohmann::json with_model_of_checkpoint(nlohmann::json config, bool* taken) {
  if (taken) *taken = false;
  if (!config.is_object() || !config.contains("load") || !config["load"].is_string()) return config;
  const std::string load = config["load"].get<std::string>();
  if (load.empty()) return config;
  const nlohmann::json client_state = checkpoint::read_client_state(load);
  if (!client_state.is_object() || !client_state.contains("config") ||
      !client_state["config"].contains("model"))
    return config;  // load_checkpoint names what is wrong with it
  const nlohmann::json& saved = client_state["config"]["model"];
  check_lora_alpha(config, client_state["config"], load);
  // The model's tokenizer comes with it, for token data, unless the file names one.
  const nlohmann::json::json_pointer data_type("/data/type");
  const bool token_data = config.contains(data_type) &&
                          config::read_choice("data.type", config[data_type], data_kinds(),
                                              config::Quoting::kQuoted) != DataKind::kText;
  const std::string tokenizer = tokenizer_of(client_state["config"], load);
  if (token_data && !tokenizer.empty() &&
      !config.contains(nlohmann::json::json_pointer("/sample/tokenizer")))
    job_keys().set(config, "sample.tokenizer", tokenizer);
  if (!config.contains("model")) {
    config["model"] = saved;
    if (taken) *taken = true;
    return config;
  }
  // Both: the keys the file gives must be the checkpoint's (dropout aside, which a
  // fine-tune may change, and a rotary model's context: it has no learned positions, and
  // trains at any length up to the one its rotation was trained for, model.context's own
  // check); the rest come from the checkpoint.
  nlohmann::json checkpoint_model = saved;
  const models::ModelConfig saved_model = models::parse_model_config({{"model", saved}});
  const bool rotary = models::llama_family(saved_model);
  if (rotary && saved_model.llama.max_position_embeddings == 0 && checkpoint_model.is_object())
    checkpoint_model["max_position_embeddings"] = saved_model.llama.context;  // older checkpoints
  nlohmann::json merged = checkpoint_model;
  if (config["model"].is_object()) merged.merge_patch(config["model"]);
  const auto& keys = models::model_keys();
  const nlohmann::json mine = keys.write(models::parse_model_config({{"model", merged}}));
  const nlohmann::json theirs =
      keys.write(models::parse_model_config({{"model", checkpoint_model}}));
  for (const auto& change : nlohmann::json::diff(theirs, mine)) {
    const std::string path = change["path"].get<std::string>();  // e.g. /model/d_model
    if (path == "/model/dropout") continue;
    if (rotary && path == "/model/context") continue;
    std::string key = path.substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    const nlohmann::json::json_pointer pointer(path);
    auto shown = [&](const nlohmann::json& j) {
      return j.contains(pointer) ? j[pointer].dump() : std::string("nothing");
    };
    throw io::InputError(key + " " + shown(mine) + " contradicts the checkpoint in " + load + " (" +
                         shown(theirs) +
                         "); leave it out of the model section to take the checkpoint's");
  }
  config["model"] = merged;
  return config;
}

topology::ParallelLayout forward_layout(int ranks, int tensor, int experts) {
  if (tensor < 1 || ranks % tensor != 0) {
    throw io::InputError("--model " + std::to_string(tensor) + " must divide the job's ranks (" +
                         std::to_string(ranks) + ")");
  }
  if (experts < 1 || (ranks / tensor) % experts != 0) {
    throw io::InputError("--expert-parallel " + std::to_string(experts) +
                         " must divide the job's ranks over --model (" +
                         std::to_string(ranks / tensor) + ")");
  }
  return {.pipe = ranks / (tensor * experts), .data = experts, .tensor = tensor, .expert = experts};
}

nlohmann::json config_of_checkpoint(const std::string& checkpoint, int64_t micro_batch,
                                    const topology::ParallelLayout& layout) {
  // Forward-only use needs no training schedule (saved_config left it out) and runs whole
  // sequences, over this job's layout.
  nlohmann::json config = saved_config(checkpoint);
  const auto& keys = job_keys();
  keys.erase(config, "train_batch_size");
  set_layout_keys(config, layout);
  keys.set(config, "train_micro_batch_size_per_gpu", micro_batch);
  keys.set(config, "gradient_accumulation_steps", 1);
  keys.set(config, "load", "");
  keys.set(config, "save", "");  // forward-only use writes none of the training run's outputs
  keys.erase(config, "log");
  keys.erase(config, "trace");
  keys.erase(config, "device");  // the machine that reads the checkpoint decides
  // A tokenizer the checkpoint carries is read where the checkpoint is now.
  const std::string tokenizer = tokenizer_of(config, checkpoint);
  if (!tokenizer.empty()) keys.set(config, "sample.tokenizer", tokenizer);
  return config;
}

}  // namespace pipetrain::trainer
