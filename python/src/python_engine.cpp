#include "python_engine.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "data/sample_position.h"
#include "data/token_data.h"
#include "pipetrain/checkpoint/checkpoint.h"
#include "pipetrain/comm/mpi_communicator.h"
#include "pipetrain/config/json_value.h"
#include "pipetrain/config/unknown_keys.h"
#include "pipetrain/engine/training_config.h"
#include "pipetrain/io/errors.h"
#include "pipetrain/topology/process_topology.h"
#include "trainer/job.h"
#include "trainer/job_config.h"
#include "trainer/model_files.h"
#include "trainer/model_flops.h"
#include "trainer/resume.h"

namespace pipetrain::python {
namespace {

namespace fs = std::filesystem;

module::PartitionMethod boundaries(const std::vector<int>& parts) {
  std::ostringstream list;
  for (std::size_t v = 1; v + 1 < parts.size(); ++v) list << (v > 1 ? "," : "") << parts[v];
  return module::PartitionMethod("boundaries:" + list.str());
}

}  // namespace

namespace {

const config::KeyTable<PythonConfig>& python_keys() {
  static const config::KeyTable<PythonConfig> table = [] {
    config::KeyTable<PythonConfig> t;
    t.include(engine::training_keys(), PIPETRAIN_FIELD(engine))
        .include(topology::layout_keys(), PIPETRAIN_FIELD(layout))
        .check([](const PythonConfig& c) {
          const topology::ParallelLayout& l = c.layout;
          if (l.tensor > 1 || l.context > 1 || l.expert > 1) {
            throw io::InputError(
                "model_parallel, context_parallel and expert_parallel: the Python door runs "
                "pipe x data only (pipetrain train runs the others)");
          }
        });
    return t;
  }();
  return table;
}

}  // namespace

PythonConfig read_config(const nlohmann::json& given) {
  nlohmann::json json = given;
  config::accept_alias(json, "bfloat16", "bf16");  // DeepSpeed reads both
  PythonConfig config;
  config::refuse_unknown_keys(python_keys().read(json, config), python_keys().names());
  return config;
}

PythonEngine::PythonEngine(const std::vector<PythonLayer>& layers, SharedPy loss_fn,
                           const ModuleLayout& layout, const nlohmann::json& config_json) {
  auto world = comm::MpiCommunicator::world();
  if (world->size() % layout.stages != 0) {
    throw io::InputError("a PipelineModule of " + std::to_string(layout.stages) + " stages on " +
                         std::to_string(world->size()) +
                         " ranks: the ranks must be a multiple of the stages");
  }
  const int data = world->size() / layout.stages;
  const PythonConfig read = read_config(config_json);
  engine::TrainingConfig config = read.engine;
  engine::resolve_batch(config, data);
  if (read.layout.chunks != layout.chunks) {
    throw std::logic_error("the module was built for " + std::to_string(layout.chunks) +
                           " chunks per stage, the config's pipeline.chunks is " +
                           std::to_string(read.layout.chunks));
  }
  if (read.layout.data && read.layout.data != data) {
    throw io::InputError("data_parallel " + std::to_string(read.layout.data) + ": the job's " +
                         std::to_string(world->size()) + " ranks over " +
                         std::to_string(layout.stages) + " stages give " + std::to_string(data));
  }
  grid_ = std::make_shared<topology::Grid>(
      topology::pipe_data_parallel_topology(layout.stages, data), world);
  std::vector<module::LayerSpec> specs;
  specs.reserve(layers.size());
  for (const PythonLayer& layer : layers) specs.push_back(layer_spec(layer));
  module_ = std::make_shared<module::PipelineModule>(
      std::move(specs), loss_function(std::move(loss_fn), grid_->stage_id()),
      module::PipelineModuleOptions{
          .stages = layout.stages,
          .stage_id = grid_->stage_id(),
          .chunks = layout.chunks,
          .placement = config.pipeline.schedule.placement(),
          .partition_method = boundaries(layout.parts),
          .seed = layout.seed,
          .activation_checkpoint_interval = layout.activation_checkpoint_interval,
          .checkpointable_types = layout.checkpointable_types});
  effective_ = config_json;
  effective_["train_batch_size"] = config.train_batch_size;
  effective_["train_micro_batch_size_per_gpu"] = config.train_micro_batch_size_per_gpu;
  effective_["gradient_accumulation_steps"] = config.gradient_accumulation_steps;
  engine_ = std::make_unique<engine::PipelineEngine>(module_, grid_, std::move(config));
}

PythonEngine::PythonEngine(const nlohmann::json& config_json) {
  trainer::check_lora_section(config_json);
  nlohmann::json config = config_json;
  const int ranks = comm::MpiCommunicator::world()->size();
  const std::string kept = trainer::keep_global_batch(config, ranks);
  trainer::Job job = trainer::build_job(trainer::with_model_of_checkpoint(config));
  const std::string& load = job.config.trainer.load;
  if (!load.empty()) checkpoint::load_checkpoint(*job.engine, load, "latest", job.train_data.get());
  if (!kept.empty() && job.grid->global_rank() == 0) std::printf("%s\n", kept.c_str());
  const std::string& tokenizer = job.config.trainer.sample.tokenizer;
  if (!tokenizer.empty()) model_files_ = fs::absolute(tokenizer).parent_path().string();
  tokens_per_sample_ = job.model.tokens_per_sample();
  context_ = job.model.tokens() ? job.model.tokens()->context : 0;
  objective_statistics_ = job.objective_statistics;
  flops_per_sample_ = trainer::model_flops_per_sample(job.config.model);
  peak_flops_ = trainer::peak_flops(job);
  grid_ = std::move(job.grid);
  comms_ = std::move(job.comms);
  module_ = std::move(job.module);
  engine_ = std::move(job.engine);
  effective_ = std::move(job.effective);
  train_windows_ = std::move(job.train_data);
  validation_windows_ = std::move(job.validation_data);
}

double PythonEngine::train_batch(engine::MicroBatchSource* data) {
  if (!objective_statistics_) return engine_->train_batch(data);
  objective_statistics_->clear();  // what evaluation added
  const double loss = engine_->train_batch(data);
  objective_metrics_ =
      objective_statistics_->take(*grid_->world_comm(), grid_->tensor_parallel_id() == 0);
  return loss;
}

std::map<std::string, double> PythonEngine::objective_metrics() {
  return objective_metrics_;
}

std::pair<std::vector<std::vector<int64_t>>, std::vector<std::vector<double>>>
PythonEngine::generate(const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens,
                       const trainer::SamplingOptions& options,
                       const std::vector<uint64_t>& seeds) {
  if (context_ == 0)
    throw io::InputError("generate: the engine's model is not a built-in language model");
  if (!seeds.empty() && seeds.size() != prompts.size())
    throw io::InputError("generate: " + std::to_string(seeds.size()) + " seeds for " +
                         std::to_string(prompts.size()) + " prompts (give one per prompt)");
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty() ||
        static_cast<int64_t>(prompts[i].size()) + max_new_tokens > context_ + 1)
      throw io::InputError(
          "generate: prompt " + std::to_string(i) + " of " + std::to_string(prompts[i].size()) +
          " tokens and " + std::to_string(max_new_tokens) +
          " new ones do not fit the model's context + 1 (" + std::to_string(context_ + 1) + ")");
  }
  std::vector<trainer::PromptRequest> requests;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back({.tokens = prompts[i], .max_new_tokens = max_new_tokens});
    if (!seeds.empty()) requests.back().seed = seeds[i];
  }
  std::vector<std::vector<double>> logprobs;
  auto sequences = trainer::sample_in_flight(*engine_, requests, options, context_, &logprobs);
  return {std::move(sequences), std::move(logprobs)};
}

std::pair<double, std::vector<module::Activation>> PythonEngine::eval_batch(
    engine::MicroBatchSource* data, bool return_outputs) {
  engine::PipelineEngine::EvalResult result = engine_->eval_batch(data, return_outputs);
  return {result.loss, std::move(result.outputs)};
}

void PythonEngine::use_token_windows(const std::vector<std::string>& paths, const std::string& type,
                                     int token_bytes, int64_t vocab_size, int64_t context,
                                     double validation_fraction) {
  // data.type's spellings; TokenWindows reads two of them.
  const trainer::DataKind kind =
      config::read_choice("TokenWindows: data_type", nlohmann::json(type), trainer::data_kinds(),
                          config::Quoting::kQuoted);
  data::TokenCorpus corpus;
  if (kind == trainer::DataKind::kText) {
    corpus = data::text_corpus(paths, validation_fraction);
  } else if (kind == trainer::DataKind::kTokens) {
    corpus = data::token_files(paths, token_bytes, vocab_size, validation_fraction);
  } else {
    throw io::InputError("TokenWindows: data_type '" + type + "' is not one of text, tokens");
  }
  const data::SampleShare share{grid_->data_parallel_id(), grid_->data_parallel_size()};
  const auto& config = engine_->config();
  auto source = [&](const data::TokenSpan& part, uint64_t stream) {
    return std::make_unique<data::SequenceSource>(
        part, vocab_size, context, config.train_micro_batch_size_per_gpu,
        static_cast<uint64_t>(config.seed), stream, share);
  };
  train_windows_ = source(corpus.train, data::kTrainingStream);
  validation_windows_ = source(corpus.validation, data::kValidationStream);
}

engine::MicroBatchSource* PythonEngine::token_windows(bool validation) {
  return validation ? validation_windows_.get() : train_windows_.get();
}

void PythonEngine::save_checkpoint(const std::string& directory, const std::string& tag,
                                   const nlohmann::json& client_state) {
  const nlohmann::json state = {{"config", effective_}, {"client_state", client_state}};
  // A fine-tune keeps its model's tokenizer and generation files beside its checkpoints, as
  // pipetrain train does.
  if (!model_files_.empty() && grid_->global_rank() == 0) {
    fs::create_directories(directory);
    trainer::copy_model_files(model_files_, directory);
  }
  checkpoint::save_checkpoint(*engine_, directory, tag, state, train_windows_.get());
}

nlohmann::json PythonEngine::load_checkpoint(const std::string& directory, const std::string& tag) {
  const nlohmann::json state =
      checkpoint::load_checkpoint(*engine_, directory, tag, train_windows_.get());
  return state.is_object() && state.contains("client_state") ? state["client_state"]
                                                             : nlohmann::json::object();
}

}  // namespace pipetrain::python
